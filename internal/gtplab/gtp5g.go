// SPDX-License-Identifier: Apache-2.0

package gtplab

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// The UPF kinds the lab can set up.
const (
	UPFGTP   = "gtp"   // the kernel's own gtp module (PDP contexts)
	UPFGTP5G = "gtp5g" // free5GC's gtp5g module (PDRs and FARs), what free5GC's UPF drives
)

// gtp5g's netlink interface (its include/link.h, genl.h, genl_pdr.h and
// genl_far.h, v0.10.2): the numbers its UPF and ours must agree on.
const (
	gtp5gLinkFD1  = 1 // IFLA_GTP5G_FD1: the GTP-U socket's fd
	gtp5gLinkRole = 3 // IFLA_GTP5G_ROLE: 0 is the UPF

	gtp5gCmdAddPDR = 1
	gtp5gCmdAddFAR = 2

	gtp5gAttrLink = 1 // the device's ifindex, in every command

	gtp5gPDRID          = 3
	gtp5gPDRPrecedence  = 4
	gtp5gPDRPDI         = 5
	gtp5gPDROHR         = 6 // outer header removal
	gtp5gPDRFARID       = 7
	gtp5gPDIUEAddrIPv4  = 1
	gtp5gPDIFTEID       = 2
	gtp5gPDISrcIntf     = 4
	gtp5gFTEIDITEID     = 1
	gtp5gFTEIDAddrIPv4  = 2
	gtp5gFARID          = 3
	gtp5gFARApplyAction = 4
	gtp5gFARFwdParam    = 5
	gtp5gFwdParamOHC    = 1 // outer header creation
	gtp5gOHCDescription = 1
	gtp5gOHCOTEID       = 2
	gtp5gOHCPeerIPv4    = 3
	gtp5gOHCPort        = 4

	srcIntfAccess  = 0 // 3GPP TS 29.244 source interface: from the RAN (N3)
	srcIntfCore    = 1 // from the data network (N6)
	ohrGTPUUDPIPv4 = 0 // outer header removal: GTP-U/UDP/IPv4
	ohcGTPUUDPIPv4 = 0x0100
	farForward     = 0x02
)

// ErrGTP5GUnavailable says that gtp5g cannot be had for the running kernel
// (lab/gtp5g.sh found no headers for it); the error text says why.
var ErrGTP5GUnavailable = errors.New("gtp5g unavailable for this kernel")

// LoadGTP5G makes sure gtp5g is loaded: already there, installed for
// modprobe (a real node), or the lab's build for the running kernel
// (SWIFTLANE_GTP5G_KO, else .cache/gtp5g/<release>/gtp5g.ko, made by
// lab/gtp5g.sh).
func LoadGTP5G() error {
	if _, err := os.Stat("/sys/module/gtp5g"); err == nil {
		return nil
	}
	if exec.Command("modprobe", "gtp5g").Run() == nil {
		return nil
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return err
	}
	rel := unix.ByteSliceToString(u.Release[:])
	dir := filepath.Join(cacheDir(), "gtp5g", rel)
	ko := os.Getenv("SWIFTLANE_GTP5G_KO")
	if ko == "" {
		ko = filepath.Join(dir, "gtp5g.ko")
	}
	f, err := os.Open(ko)
	if err != nil {
		if why, rerr := os.ReadFile(filepath.Join(dir, "unavailable")); rerr == nil {
			return fmt.Errorf("%w: %s", ErrGTP5GUnavailable, strings.TrimSpace(string(why)))
		}
		return fmt.Errorf("gtp5g is not loaded, modprobe gtp5g failed and %s cannot be opened (%w): build it with lab/gtp5g.sh, or install free5GC's gtp5g", ko, err)
	}
	defer f.Close()
	// insmod does not load dependencies: gtp5g needs udp_tunnel.
	if out, err := exec.Command("modprobe", "udp_tunnel").CombinedOutput(); err != nil {
		return fmt.Errorf("modprobe udp_tunnel (gtp5g needs it): %w: %s", err, strings.TrimSpace(string(out)))
	}
	if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("load %s: %w (see dmesg)", ko, err)
	}
	return nil
}

// cacheDir is the project's cache (the Makefile exports SWIFTLANE_CACHE).
func cacheDir() string {
	if d := os.Getenv("SWIFTLANE_CACHE"); d != "" {
		return d
	}
	return ".cache"
}

// upGTP5G runs on a thread inside the UPF namespace: a gtp5g device on the
// N3 socket, and for each UE an uplink PDR (its TEID, outer header removed,
// forwarded into the device and on to N6) and a downlink PDR (its address,
// GTP-U header towards the gNB created by the FAR), as free5GC's UPF would
// program them from a PFCP session.
func (l *Lab) upGTP5G() error {
	t := l.T
	fd, err := bindGTPU(t.UPFN3, GTPUPort)
	if err != nil {
		return err
	}
	l.upfFD = fd
	if err := gtp5gLinkAdd(t.GTPDev, fd); err != nil {
		return err
	}
	link, err := netlink.LinkByName(t.GTPDev)
	if err != nil {
		return err
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return err
	}
	fam, err := netlink.GenlFamilyGet("gtp5g")
	if err != nil {
		return fmt.Errorf("generic netlink family gtp5g: %w", err)
	}
	ifindex := uint32(link.Attrs().Index)
	for i := range t.ueCount() {
		ue := t.UEAddrN(i)
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: int(ifindex), Dst: &net.IPNet{IP: ue, Mask: net.CIDRMask(32, 32)}}); err != nil {
			return fmt.Errorf("route to UE %s via %s: %w", ue, t.GTPDev, err)
		}
		ul, dl := uint32(2*i+1), uint32(2*i+2) // PDR and FAR ids, one pair per direction
		fars := []*nl.RtAttr{
			// Uplink: forward, no outer header (the PDR removed it).
			nl.NewRtAttr(gtp5gFARApplyAction, nl.Uint8Attr(farForward)),
			// Downlink: forward inside a new GTP-U header to the gNB.
			nl.NewRtAttr(gtp5gFARApplyAction, nl.Uint8Attr(farForward)),
		}
		fwd := nested(gtp5gFARFwdParam, nested(gtp5gFwdParamOHC,
			nl.NewRtAttr(gtp5gOHCDescription, nl.Uint16Attr(ohcGTPUUDPIPv4)),
			nl.NewRtAttr(gtp5gOHCOTEID, nl.Uint32Attr(t.DLTEID+uint32(i))),
			nl.NewRtAttr(gtp5gOHCPeerIPv4, []byte(t.GNBN3.To4())),
			nl.NewRtAttr(gtp5gOHCPort, nl.Uint16Attr(GTPUPort))))
		steps := []struct {
			what  string
			cmd   uint8
			attrs []*nl.RtAttr
		}{
			{"uplink FAR", gtp5gCmdAddFAR, []*nl.RtAttr{nl.NewRtAttr(gtp5gFARID, nl.Uint32Attr(ul)), fars[0]}},
			{"downlink FAR", gtp5gCmdAddFAR, []*nl.RtAttr{nl.NewRtAttr(gtp5gFARID, nl.Uint32Attr(dl)), fars[1], fwd}},
			{"uplink PDR", gtp5gCmdAddPDR, []*nl.RtAttr{
				nl.NewRtAttr(gtp5gPDRID, nl.Uint32Attr(ul)),
				nl.NewRtAttr(gtp5gPDRPrecedence, nl.Uint32Attr(255)),
				nested(gtp5gPDRPDI,
					nl.NewRtAttr(gtp5gPDISrcIntf, nl.Uint8Attr(srcIntfAccess)),
					nested(gtp5gPDIFTEID,
						nl.NewRtAttr(gtp5gFTEIDITEID, nl.Uint32Attr(t.ULTEID+uint32(i))),
						nl.NewRtAttr(gtp5gFTEIDAddrIPv4, []byte(t.UPFN3.To4())))),
				nl.NewRtAttr(gtp5gPDROHR, nl.Uint8Attr(ohrGTPUUDPIPv4)),
				nl.NewRtAttr(gtp5gPDRFARID, nl.Uint32Attr(ul)),
			}},
			{"downlink PDR", gtp5gCmdAddPDR, []*nl.RtAttr{
				nl.NewRtAttr(gtp5gPDRID, nl.Uint32Attr(dl)),
				nl.NewRtAttr(gtp5gPDRPrecedence, nl.Uint32Attr(255)),
				nested(gtp5gPDRPDI,
					nl.NewRtAttr(gtp5gPDISrcIntf, nl.Uint8Attr(srcIntfCore)),
					nl.NewRtAttr(gtp5gPDIUEAddrIPv4, []byte(ue.To4()))),
				nl.NewRtAttr(gtp5gPDRFARID, nl.Uint32Attr(dl)),
			}},
		}
		for _, s := range steps {
			if err := gtp5gCommand(fam, s.cmd, ifindex, s.attrs...); err != nil {
				return fmt.Errorf("UE %s: gtp5g %s: %w", ue, s.what, err)
			}
		}
	}
	return nil
}

// nested builds a nested attribute; gtp5g parses them strictly, which
// wants the NLA_F_NESTED flag.
func nested(typ int, children ...*nl.RtAttr) *nl.RtAttr {
	a := nl.NewRtAttr(typ|unix.NLA_F_NESTED, nil)
	for _, c := range children {
		a.AddChild(c)
	}
	return a
}

// gtp5gLinkAdd creates a gtp5g device in the UPF role on the GTP-U socket
// fd (RTM_NEWLINK with gtp5g's link attributes; the netlink library has no
// type for it).
func gtp5gLinkAdd(name string, fd int) error {
	req := nl.NewNetlinkRequest(unix.RTM_NEWLINK, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK)
	req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
	req.AddData(nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(name)))
	info := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
	info.AddRtAttr(nl.IFLA_INFO_KIND, nl.NonZeroTerminated(UPFGTP5G))
	data := info.AddRtAttr(nl.IFLA_INFO_DATA, nil)
	data.AddRtAttr(gtp5gLinkFD1, nl.Uint32Attr(uint32(fd)))
	data.AddRtAttr(gtp5gLinkRole, nl.Uint32Attr(0))
	req.AddData(info)
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("create gtp5g device %s: %w", name, err)
	}
	return nil
}

// gtp5gCommand sends one gtp5g generic netlink command for the device
// ifindex and waits for the kernel's answer.
func gtp5gCommand(fam *netlink.GenlFamily, cmd uint8, ifindex uint32, attrs ...*nl.RtAttr) error {
	req := nl.NewNetlinkRequest(int(fam.ID), unix.NLM_F_ACK)
	req.AddData(&nl.Genlmsg{Command: cmd, Version: uint8(fam.Version)})
	req.AddData(nl.NewRtAttr(gtp5gAttrLink, nl.Uint32Attr(ifindex)))
	for _, a := range attrs {
		req.AddData(a)
	}
	_, err := req.Execute(unix.NETLINK_GENERIC, 0)
	return err
}
