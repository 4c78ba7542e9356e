// SPDX-License-Identifier: Apache-2.0

// Package gtplab is a 5G user plane in network namespaces for the VM lab:
// a UE namespace whose tunnel interface belongs to our gNB (Gnb: TUN <->
// GTP-U over UDP, the analogue of UERANSIM's nr-gnb), and a UPF/DN namespace
// where a GTP-U device decapsulates and encapsulates: the kernel's gtp with
// a PDP context per UE, or free5GC's gtp5g with a PDR and FAR per UE and
// direction, both set over netlink. The UE pings the UPF's own N6 address,
// so the whole GTP-U path runs in the gNB process's context.
package gtplab

import (
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Topology names the namespaces, devices, addresses and tunnel ids.
type Topology struct {
	UENetns, GNBNetns, UPFNetns string
	TUN                         string // the UE's tunnel interface (owned by the gNB)
	GTPDev                      string // the UPF's gtp device
	UPF                         string // UPFGTP (default) or UPFGTP5G: the kernel module that is the UPF
	UEAddr                      net.IP // the first UE's PDU session address; UE i has UEAddr+i
	UEs                         int    // UEs with a PDU session (0 means 1)
	GNBN3, UPFN3                net.IP // N3: gNB <-> UPF over veth
	N6Addr                      net.IP // the UPF's N6 address, what the UE pings
	ULTEID, DLTEID              uint32 // the first UE's uplink (UPF receives) and downlink (gNB receives) TEIDs; UE i's are +i
}

func (t Topology) ueCount() int { return max(1, t.UEs) }

// UPFKind is the UPF's module, UPFGTP when unset.
func (t Topology) UPFKind() string {
	if t.UPF == "" {
		return UPFGTP
	}
	return t.UPF
}

// UEAddrN is UE i's address.
func (t Topology) UEAddrN(i int) net.IP {
	a := append(net.IP(nil), t.UEAddr.To4()...)
	a[3] += byte(i)
	return a
}

// uplinkTEID is the uplink TEID of the UE that sent IPv4 packet p (by its
// source address).
func (t Topology) uplinkTEID(p []byte) (uint32, bool) {
	if len(p) < 20 || p[0]>>4 != 4 {
		return 0, false
	}
	base := t.UEAddr.To4()
	src := p[12:16]
	if src[0] != base[0] || src[1] != base[1] || src[2] != base[2] || src[3] < base[3] {
		return 0, false
	}
	i := int(src[3] - base[3])
	if i >= t.ueCount() {
		return 0, false
	}
	return t.ULTEID + uint32(i), true
}

// GTPUPort is the GTP-U UDP port (3GPP TS 29.281).
const GTPUPort = 2152

// Default is the lab's topology.
func Default() Topology {
	return Topology{
		UENetns: "swl-ue", GNBNetns: "swl-gnb", UPFNetns: "swl-upf",
		TUN: "uesimtun0", GTPDev: "gtp-upf",
		UEAddr: net.IPv4(10, 60, 0, 1).To4(), GNBN3: net.IPv4(192, 168, 70, 1).To4(),
		UPFN3: net.IPv4(192, 168, 70, 2).To4(), N6Addr: net.IPv4(10, 100, 0, 1).To4(),
		ULTEID: 0x100, DLTEID: 0x200, UEs: 4,
	}
}

// Lab is a set-up topology; Close removes it. The UPF's GTP-U socket lives
// as long as the Lab: the kernel's gtp device stops working when it closes.
type Lab struct {
	T     Topology
	upfFD int
	v0FD  int
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Up creates the namespaces, the N3 veth pair, the N6 address and the UPF's
// GTP-U device with each UE's session. It needs root and the UPF's module
// (gtp, or gtp5g: LoadGTP5G).
func Up(t Topology) (*Lab, error) {
	if k := t.UPFKind(); k != UPFGTP && k != UPFGTP5G {
		return nil, fmt.Errorf("UPF %q: want %q (the kernel's gtp module) or %q (free5GC's gtp5g)", k, UPFGTP, UPFGTP5G)
	}
	l := &Lab{T: t, upfFD: -1, v0FD: -1}
	if err := l.up(); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

func (l *Lab) up() error {
	t := l.T
	if t.UPFKind() == UPFGTP5G {
		if err := LoadGTP5G(); err != nil {
			return err
		}
	} else if err := exec.Command("modprobe", "gtp").Run(); err != nil {
		return fmt.Errorf("modprobe gtp: %w (the lab needs the kernel's gtp module)", err)
	}
	for _, ns := range []string{t.UENetns, t.GNBNetns, t.UPFNetns} {
		if err := ip("netns", "add", ns); err != nil {
			return err
		}
		if err := ip("-n", ns, "link", "set", "lo", "up"); err != nil {
			return err
		}
	}
	steps := [][]string{
		{"-n", t.GNBNetns, "link", "add", "n3", "type", "veth", "peer", "name", "n3", "netns", t.UPFNetns},
		{"-n", t.GNBNetns, "addr", "add", t.GNBN3.String() + "/24", "dev", "n3"},
		{"-n", t.UPFNetns, "addr", "add", t.UPFN3.String() + "/24", "dev", "n3"},
		{"-n", t.GNBNetns, "link", "set", "n3", "up"},
		{"-n", t.UPFNetns, "link", "set", "n3", "up"},
		{"-n", t.UPFNetns, "link", "add", "n6", "type", "dummy"},
		{"-n", t.UPFNetns, "addr", "add", t.N6Addr.String() + "/24", "dev", "n6"},
		{"-n", t.UPFNetns, "link", "set", "n6", "up"},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return err
		}
	}
	if t.UPFKind() == UPFGTP5G {
		return inNetns(t.UPFNetns, l.upGTP5G)
	}
	return inNetns(t.UPFNetns, l.upGTP)
}

// bindGTPU opens a UDP socket bound to addr:port for a GTP device.
func bindGTPU(addr net.IP, port int) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("GTP-U socket: %w", err)
	}
	sa := &unix.SockaddrInet4{Port: port}
	copy(sa.Addr[:], addr.To4())
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bind GTP socket to %s:%d: %w", addr, port, err)
	}
	return fd, nil
}

// upGTP runs on a thread inside the UPF namespace.
func (l *Lab) upGTP() error {
	t := l.T
	fd, err := bindGTPU(t.UPFN3, GTPUPort)
	if err != nil {
		return err
	}
	l.upfFD = fd
	// The netlink library always sends the GTPv0 socket attribute, so the
	// device gets one (port 3386, unused by 5G) rather than fd 0.
	v0, err := bindGTPU(t.UPFN3, 3386)
	if err != nil {
		return err
	}
	l.v0FD = v0
	h, err := netlink.NewHandle()
	if err != nil {
		return err
	}
	defer h.Close()
	gtp := &netlink.GTP{LinkAttrs: netlink.LinkAttrs{Name: t.GTPDev}, FD0: v0, FD1: fd, Role: 0 /* GGSN: the network side */}
	if err := h.LinkAdd(gtp); err != nil {
		return fmt.Errorf("create gtp device %s: %w", t.GTPDev, err)
	}
	link, err := h.LinkByName(t.GTPDev)
	if err != nil {
		return err
	}
	if err := h.LinkSetUp(link); err != nil {
		return err
	}
	for i := range t.ueCount() {
		ue := t.UEAddrN(i)
		if err := h.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: &net.IPNet{IP: ue, Mask: net.CIDRMask(32, 32)}}); err != nil {
			return fmt.Errorf("route to UE %s via %s: %w", ue, t.GTPDev, err)
		}
		pdp := &netlink.PDP{Version: 1, PeerAddress: t.GNBN3, MSAddress: ue, ITEI: t.ULTEID + uint32(i), OTEI: t.DLTEID + uint32(i)}
		if err := h.GTPPDPAdd(link, pdp); err != nil {
			return fmt.Errorf("add PDP context %s: %w", pdp, err)
		}
	}
	return nil
}

// Close removes the namespaces (and with them every device) and the socket.
func (l *Lab) Close() error {
	for _, fd := range []*int{&l.upfFD, &l.v0FD} {
		if *fd > 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
	var first error
	for _, ns := range []string{l.T.UENetns, l.T.GNBNetns, l.T.UPFNetns} {
		if err := ip("netns", "del", ns); err != nil && first == nil && !strings.Contains(err.Error(), "No such file") {
			first = err
		}
	}
	return first
}

// GTPStats are the UPF gtp device's packet counters.
type GTPStats struct{ RxPackets, TxPackets uint64 }

// Stats reads the gtp device's counters.
func (l *Lab) Stats() (GTPStats, error) {
	var s GTPStats
	err := inNetns(l.T.UPFNetns, func() error {
		link, err := netlink.LinkByName(l.T.GTPDev)
		if err != nil {
			return err
		}
		st := link.Attrs().Statistics
		if st == nil {
			return fmt.Errorf("%s has no statistics", l.T.GTPDev)
		}
		s = GTPStats{RxPackets: st.RxPackets, TxPackets: st.TxPackets}
		return nil
	})
	return s, err
}

// Ifindex is a device's index inside a namespace.
func Ifindex(ns, dev string) (int, error) {
	var idx int
	err := inNetns(ns, func() error {
		l, err := netlink.LinkByName(dev)
		if err == nil {
			idx = l.Attrs().Index
		}
		return err
	})
	return idx, err
}

// inNetns runs f on an OS thread switched into a named namespace. The thread
// is not returned to the runtime's pool (it would carry the namespace).
func inNetns(name string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		h, err := netns.GetFromPath("/run/netns/" + name) // where ip(8) puts them
		if err != nil {
			errc <- fmt.Errorf("netns %s: %w", name, err)
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			errc <- fmt.Errorf("setns %s: %w", name, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}
