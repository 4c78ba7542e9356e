// SPDX-License-Identifier: Apache-2.0

package gtplab

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// GTP-U header (TS 29.281 §5.1): version 1, protocol type GTP, no optional
// fields; message type 255 is a G-PDU (a user packet).
const (
	gtpFlagsV1   = 0x30
	gtpTypeGPDU  = 0xff
	gtpHeaderLen = 8
	maxPacket    = 65535
)

// Gnb moves the UE's packets between its tunnel interface and GTP-U: uplink
// packets read from the TUN are encapsulated and sent to the UPF, downlink
// G-PDUs with our TEID are decapsulated and written to the TUN.
type Gnb struct {
	T          Topology
	tun        *os.File
	sock       int
	Uplink     atomic.Uint64
	Downlink   atomic.Uint64
	DroppedBad atomic.Uint64
}

// NewGnb creates the TUN in the UE namespace (address, route to the N6
// network) and the GTP-U socket in the gNB namespace.
func NewGnb(t Topology) (*Gnb, error) {
	g := &Gnb{T: t, sock: -1}
	if err := inNetns(t.UENetns, g.openTUN); err != nil {
		g.Close()
		return nil, err
	}
	if err := inNetns(t.GNBNetns, g.openSocket); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

func (g *Gnb) openTUN() error {
	ensureTUNDevice()
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /dev/net/tun: %w (modprobe tun)", err)
	}
	ifr, err := unix.NewIfreq(g.T.TUN)
	if err != nil {
		unix.Close(fd)
		return err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return fmt.Errorf("create TUN %s: %w", g.T.TUN, err)
	}
	g.tun = os.NewFile(uintptr(fd), "/dev/net/tun")
	link, err := netlink.LinkByName(g.T.TUN)
	if err != nil {
		return err
	}
	if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: &net.IPNet{IP: g.T.UEAddr, Mask: net.CIDRMask(32, 32)}}); err != nil {
		return fmt.Errorf("address %s on %s: %w", g.T.UEAddr, g.T.TUN, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return err
	}
	dn := &net.IPNet{IP: g.T.N6Addr.Mask(net.CIDRMask(24, 32)), Mask: net.CIDRMask(24, 32)}
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: dn, Src: g.T.UEAddr}); err != nil {
		return fmt.Errorf("route to %s via %s: %w", dn, g.T.TUN, err)
	}
	return nil
}

func (g *Gnb) openSocket() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	g.sock = fd
	local := &unix.SockaddrInet4{Port: GTPUPort}
	copy(local.Addr[:], g.T.GNBN3)
	if err := unix.Bind(fd, local); err != nil {
		return fmt.Errorf("bind %s:%d: %w", g.T.GNBN3, GTPUPort, err)
	}
	peer := &unix.SockaddrInet4{Port: GTPUPort}
	copy(peer.Addr[:], g.T.UPFN3)
	if err := unix.Connect(fd, peer); err != nil {
		return fmt.Errorf("connect to the UPF %s:%d: %w", g.T.UPFN3, GTPUPort, err)
	}
	return nil
}

// Run forwards packets until ctx ends or an I/O error. Each direction is a
// plain blocking loop on its own thread: one system call per packet, which
// is where the kernel's GTP-U code runs for this process.
func (g *Gnb) Run(ctx context.Context) error {
	errc := make(chan error, 2)
	go func() { errc <- g.uplink() }()
	go func() { errc <- g.downlink() }()
	select {
	case <-ctx.Done():
		g.Close()
		return nil
	case err := <-errc:
		g.Close()
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
}

func (g *Gnb) uplink() error {
	buf := make([]byte, gtpHeaderLen+maxPacket)
	for {
		n, err := g.tun.Read(buf[gtpHeaderLen:])
		if err != nil {
			return fmt.Errorf("read %s: %w", g.T.TUN, err)
		}
		buf[0], buf[1] = gtpFlagsV1, gtpTypeGPDU
		binary.BigEndian.PutUint16(buf[2:], uint16(n))
		binary.BigEndian.PutUint32(buf[4:], g.T.ULTEID)
		if _, err := unix.Write(g.sock, buf[:gtpHeaderLen+n]); err != nil {
			if errors.Is(err, unix.ECONNREFUSED) {
				continue // the UPF's socket is not there yet (ICMP from an earlier packet)
			}
			return fmt.Errorf("send G-PDU: %w", err)
		}
		g.Uplink.Add(1)
	}
}

func (g *Gnb) downlink() error {
	buf := make([]byte, maxPacket)
	for {
		n, err := unix.Read(g.sock, buf)
		if err != nil {
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ECONNREFUSED) {
				continue
			}
			return fmt.Errorf("receive G-PDU: %w", err)
		}
		payload, ok := g.decap(buf[:n])
		if !ok {
			g.DroppedBad.Add(1)
			continue
		}
		if _, err := g.tun.Write(payload); err != nil {
			return fmt.Errorf("write %s: %w", g.T.TUN, err)
		}
		g.Downlink.Add(1)
	}
}

// decap returns the user packet of a G-PDU for our TEID.
func (g *Gnb) decap(b []byte) ([]byte, bool) {
	return Decap(b, g.T.DLTEID)
}

// Decap parses a GTPv1-U G-PDU addressed to teid and returns its payload,
// skipping the optional sequence/N-PDU fields and extension headers.
func Decap(b []byte, teid uint32) ([]byte, bool) {
	if len(b) < gtpHeaderLen || b[0]>>5 != 1 || b[0]&0x10 == 0 || b[1] != gtpTypeGPDU {
		return nil, false
	}
	if binary.BigEndian.Uint32(b[4:]) != teid {
		return nil, false
	}
	end := gtpHeaderLen + int(binary.BigEndian.Uint16(b[2:]))
	if end > len(b) {
		return nil, false
	}
	off := gtpHeaderLen
	if b[0]&0x07 != 0 { // E, S or PN: 4 more bytes, then extension headers
		if end < off+4 {
			return nil, false
		}
		next := b[off+3]
		off += 4
		for next != 0 && b[0]&0x04 != 0 {
			if off >= end {
				return nil, false
			}
			l := int(b[off]) * 4 // length in 4-octet units, including length and next-type
			if l == 0 || off+l > end {
				return nil, false
			}
			next = b[off+l-1]
			off += l
		}
	}
	return b[off:end], true
}

// Close releases the TUN (the kernel removes the device) and the socket.
func (g *Gnb) Close() error {
	if g.tun != nil {
		g.tun.Close()
	}
	if g.sock >= 0 {
		unix.Close(g.sock)
		g.sock = -1
	}
	return nil
}

// ensureTUNDevice loads tun and creates its device node where devtmpfs did
// not (minimal guests such as the VM lab).
func ensureTUNDevice() {
	exec.Command("modprobe", "tun").Run()
	if _, err := os.Stat("/dev/net/tun"); err == nil {
		return
	}
	os.MkdirAll("/dev/net", 0o755)
	unix.Mknod("/dev/net/tun", unix.S_IFCHR|0o666, int(unix.Mkdev(10, 200)))
}
