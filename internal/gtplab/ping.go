// SPDX-License-Identifier: Apache-2.0

package gtplab

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Pinger sends ICMP echo requests from the UE namespace, one at a time, and
// measures each round trip (the UE's view of the user plane).
type Pinger struct {
	fd  int
	dst unix.SockaddrInet4
	id  uint16
	seq uint16
}

// NewPinger opens a raw ICMP socket in the UE namespace.
func NewPinger(t Topology, timeout time.Duration) (*Pinger, error) {
	p := &Pinger{fd: -1, id: uint16(os.Getpid())}
	copy(p.dst.Addr[:], t.N6Addr)
	err := inNetns(t.UENetns, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMP)
		if err != nil {
			return fmt.Errorf("raw ICMP socket: %w", err)
		}
		p.fd = fd
		// Bound to the first UE's address: the other UEs' replies (lab
		// traffic) are not this socket's to wake up for.
		if err := bindUE(fd, t.UEAddr); err != nil {
			return err
		}
		tv := unix.NsecToTimeval(timeout.Nanoseconds())
		return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	})
	if err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Ping sends one echo request and waits for its reply.
func (p *Pinger) Ping() (time.Duration, error) {
	p.seq++
	req := echoRequest(p.id, p.seq)
	start := time.Now()
	if err := unix.Sendto(p.fd, req, 0, &p.dst); err != nil {
		return 0, fmt.Errorf("send echo request to %s: %w", net.IP(p.dst.Addr[:]), err)
	}
	buf := make([]byte, 1500)
	for {
		n, _, err := unix.Recvfrom(p.fd, buf, 0)
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			if err == unix.EAGAIN {
				return 0, fmt.Errorf("no echo reply from %s (seq %d)", net.IP(p.dst.Addr[:]), p.seq)
			}
			return 0, err
		}
		if n < 20 {
			continue
		}
		ihl := int(buf[0]&0x0f) * 4
		icmp := buf[ihl:n]
		if len(icmp) >= 8 && icmp[0] == 0 && binary.BigEndian.Uint16(icmp[4:]) == p.id && binary.BigEndian.Uint16(icmp[6:]) == p.seq {
			return time.Since(start), nil
		}
	}
}

// Close closes the socket.
func (p *Pinger) Close() error {
	if p.fd >= 0 {
		unix.Close(p.fd)
		p.fd = -1
	}
	return nil
}

// echoRequest is an ICMP echo request with 56 bytes of payload.
func echoRequest(id, seq uint16) []byte {
	req := make([]byte, 64)
	req[0] = 8
	binary.BigEndian.PutUint16(req[4:], id)
	binary.BigEndian.PutUint16(req[6:], seq)
	binary.BigEndian.PutUint16(req[2:], Checksum(req))
	return req
}

// bindUE binds a raw socket to a UE's address, even while the gNB (which
// owns the address's TUN) is not running.
func bindUE(fd int, ue net.IP) error {
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_FREEBIND, 1); err != nil {
		return fmt.Errorf("IP_FREEBIND: %w", err)
	}
	sa := &unix.SockaddrInet4{}
	copy(sa.Addr[:], ue.To4())
	if err := unix.Bind(fd, sa); err != nil {
		return fmt.Errorf("bind to UE address %s: %w", ue, err)
	}
	return nil
}

// Checksum is the Internet checksum (RFC 1071) of b, for an IPv4 header or
// an ICMP message.
func Checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}
