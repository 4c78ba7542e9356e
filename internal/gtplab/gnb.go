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
	"runtime"
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

// Gnb moves the UEs' packets between their tunnel interface and GTP-U:
// uplink packets read from the TUN are encapsulated with their UE's TEID and
// sent to the UPF, downlink G-PDUs with one of our TEIDs are decapsulated and
// written to the TUN.
type Gnb struct {
	T          Topology
	tun        int
	sock       int
	Uplink     atomic.Uint64
	Downlink   atomic.Uint64
	DroppedBad atomic.Uint64
}

// NewGnb creates the TUN in the UE namespace (the UEs' addresses, a route to
// the N6 network) and the GTP-U socket in the gNB namespace.
func NewGnb(t Topology) (*Gnb, error) {
	g := &Gnb{T: t, tun: -1, sock: -1}
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

// OpenTUN creates a TUN device (IPv4 packets, no packet info) in the
// current network namespace and returns its non-blocking file, which owns
// it: the device goes when the file is closed. It is left down.
func OpenTUN(name string) (int, netlink.Link, error) {
	EnsureTUNDevice()
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, nil, fmt.Errorf("open /dev/net/tun: %w (modprobe tun)", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err == nil {
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			err = fmt.Errorf("create TUN %s: %w", name, err)
		}
	}
	var link netlink.Link
	if err == nil {
		link, err = netlink.LinkByName(name)
	}
	if err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	return fd, link, nil
}

func (g *Gnb) openTUN() error {
	fd, link, err := OpenTUN(g.T.TUN)
	if err != nil {
		return err
	}
	g.tun = fd
	for i := range g.T.ueCount() {
		a := g.T.UEAddrN(i)
		if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: &net.IPNet{IP: a, Mask: net.CIDRMask(32, 32)}}); err != nil {
			return fmt.Errorf("address %s on %s: %w", a, g.T.TUN, err)
		}
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
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
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

// The loop's shape, after UERANSIM's nr-gnb: a receiver thread per socket
// waits in poll with a timeout and drains what is ready, then queues the
// batch for one GTP task thread, which encapsulates or decapsulates and
// writes. Every packet crosses two threads (a futex wakeup), and the
// kernel's GTP-U path runs in the task thread's system calls.
const (
	pollTimeoutMs = 500 // UERANSIM's receive timeout; also how soon the threads see ctx end
	maxBatch      = 32
)

// Run forwards packets until ctx ends or an I/O error.
func (g *Gnb) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	up, down := make(chan [][]byte, 64), make(chan [][]byte, 64)
	errc := make(chan error, 3)
	go func() { errc <- g.receive(ctx, g.tun, gtpHeaderLen, up, "read "+g.T.TUN) }()
	go func() { errc <- g.receive(ctx, g.sock, 0, down, "receive G-PDU") }()
	go func() { errc <- g.task(ctx, up, down) }()
	var first error
	for range 3 {
		if err := <-errc; err != nil && first == nil && ctx.Err() == nil {
			first = err
		}
		cancel() // one thread's end ends the others within a poll timeout
	}
	g.Close() // only now: no thread is left in a system call on the fds
	return first
}

// receive is a receiver thread: poll, then read up to maxBatch packets,
// each into its own buffer with room bytes in front (for the GTP-U header).
func (g *Gnb) receive(ctx context.Context, fd, room int, out chan<- [][]byte, what string) error {
	runtime.LockOSThread()
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	scratch := make([]byte, maxPacket)
	for ctx.Err() == nil {
		n, err := unix.Poll(pfd, pollTimeoutMs)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("%s: poll: %w", what, err)
		}
		if n <= 0 {
			continue
		}
		var batch [][]byte
		for len(batch) < maxBatch {
			m, err := unix.Read(fd, scratch)
			if errors.Is(err, unix.EAGAIN) {
				break
			}
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ECONNREFUSED) {
				continue // ECONNREFUSED: an ICMP error for an earlier send (the UPF not up yet)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			b := make([]byte, room+m)
			copy(b[room:], scratch[:m])
			batch = append(batch, b)
		}
		if len(batch) > 0 {
			select {
			case out <- batch:
			case <-ctx.Done():
			}
		}
	}
	return nil
}

// task is the GTP task thread.
func (g *Gnb) task(ctx context.Context, up, down <-chan [][]byte) error {
	runtime.LockOSThread()
	for {
		select {
		case <-ctx.Done():
			return nil
		case batch := <-up:
			for _, b := range batch {
				teid, ok := g.T.uplinkTEID(b[gtpHeaderLen:])
				if !ok {
					g.DroppedBad.Add(1)
					continue
				}
				b[0], b[1] = gtpFlagsV1, gtpTypeGPDU
				binary.BigEndian.PutUint16(b[2:], uint16(len(b)-gtpHeaderLen))
				binary.BigEndian.PutUint32(b[4:], teid)
				if _, err := unix.Write(g.sock, b); err != nil {
					if errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.EAGAIN) {
						g.DroppedBad.Add(1) // the UPF's socket is not there yet; a full send buffer
						continue
					}
					return fmt.Errorf("send G-PDU: %w", err)
				}
				g.Uplink.Add(1)
			}
		case batch := <-down:
			for _, b := range batch {
				payload, ok := g.decap(b)
				if !ok {
					g.DroppedBad.Add(1)
					continue
				}
				if _, err := unix.Write(g.tun, payload); err != nil {
					return fmt.Errorf("write %s: %w", g.T.TUN, err)
				}
				g.Downlink.Add(1)
			}
		}
	}
}

// decap returns the user packet of a G-PDU for one of our UEs' TEIDs.
func (g *Gnb) decap(b []byte) ([]byte, bool) {
	if len(b) < gtpHeaderLen {
		return nil, false
	}
	teid := binary.BigEndian.Uint32(b[4:])
	if teid < g.T.DLTEID || teid-g.T.DLTEID >= uint32(g.T.ueCount()) {
		return nil, false
	}
	return Decap(b, teid)
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
	for _, fd := range []*int{&g.tun, &g.sock} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
	return nil
}

// EnsureTUNDevice loads tun and creates its device node where devtmpfs did
// not (minimal guests such as the VM lab).
func EnsureTUNDevice() {
	exec.Command("modprobe", "tun").Run()
	if _, err := os.Stat("/dev/net/tun"); err == nil {
		return
	}
	os.MkdirAll("/dev/net", 0o755)
	unix.Mknod("/dev/net/tun", unix.S_IFCHR|0o666, int(unix.Mkdev(10, 200)))
}
