// SPDX-License-Identifier: Apache-2.0

package gtplab

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Traffic is the other UEs' user-plane traffic: each UE but the first (the
// one `lab ping` measures) sends ICMP echo requests to the N6 address at a
// steady rate, so the gNB forwards a packet stream in both directions
// instead of one ping at a time. The UPF answers inside the gNB's own
// system calls, so the gNB carries all of it and this sender none.
type Traffic struct {
	Sent, Failed atomic.Uint64
}

// Run sends pps echo requests per second from each of UEs 1..n-1 until ctx
// ends. Sends fail while no gNB runs (its TUN holds the addresses); they are
// counted and the stream goes on.
func (tr *Traffic) Run(ctx context.Context, t Topology, pps int) error {
	if t.ueCount() < 2 {
		return fmt.Errorf("the topology has %d UE: traffic needs a second one", t.ueCount())
	}
	if pps < 1 || pps > 10000 {
		return fmt.Errorf("--pps %d: use 1 to 10000 packets per second per UE", pps)
	}
	return inNetns(t.UENetns, func() error {
		var fds []int
		defer func() {
			for _, fd := range fds {
				unix.Close(fd)
			}
		}()
		for i := 1; i < t.ueCount(); i++ {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.IPPROTO_ICMP)
			if err != nil {
				return fmt.Errorf("raw ICMP socket: %w", err)
			}
			fds = append(fds, fd)
			if err := bindUE(fd, t.UEAddrN(i)); err != nil {
				return err
			}
			// Replies are never read: keep their queue small.
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 0)
		}
		dst := &unix.SockaddrInet4{}
		copy(dst.Addr[:], t.N6Addr.To4())
		id := uint16(os.Getpid())
		tick := time.NewTicker(time.Second / time.Duration(pps)) // the traffic's pacing
		defer tick.Stop()
		for seq := uint16(1); ; seq++ {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
			for i, fd := range fds {
				if err := unix.Sendto(fd, echoRequest(id+uint16(i), seq), 0, dst); err != nil {
					tr.Failed.Add(1)
				} else {
					tr.Sent.Add(1)
				}
			}
		}
	})
}
