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
		p := newPacing(len(fds), pps)
		tick := time.NewTicker(p.every) // the traffic's pacing
		defer tick.Stop()
		var seq uint16
		for k := 0; ; k++ {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
			slot := k % p.slots
			if slot == 0 {
				seq++
			}
			for _, i := range p.uesOf(slot, len(fds)) {
				if err := unix.Sendto(fds[i], echoRequest(id+uint16(i), seq), 0, dst); err != nil {
					tr.Failed.Add(1)
				} else {
					tr.Sent.Add(1)
				}
			}
		}
	})
}

// minSlot is the shortest gap between two of the traffic's sends: finer
// pacing would cost the emulated guest a timer wakeup per packet.
const minSlot = 5 * time.Millisecond

// pacing spreads n UEs' sends over each period of 1/pps s, as independent
// UEs' would be: the period is cut into slots (one every `every`, at most
// one per UE, none shorter than minSlot) and slot j sends for UEs j,
// j+slots, ... So each UE still sends pps a second. Sending for every UE
// at the same instant made a burst of n packets that the measured UE's
// ping queued behind: at 128 UEs x 2/s, UE 1's RTT was 2.5x the one-UE
// figure while the guest's CPUs were 36 % busy (docs/gtp.md).
type pacing struct {
	slots int
	every time.Duration
}

func newPacing(n, pps int) pacing {
	period := time.Second / time.Duration(pps)
	slots := max(1, min(n, int(period/minSlot)))
	return pacing{slots: slots, every: period / time.Duration(slots)}
}

// uesOf lists the UEs (indexes 0..n-1) that send in slot j of a period.
func (p pacing) uesOf(j, n int) []int {
	var ues []int
	for i := j; i < n; i += p.slots {
		ues = append(ues, i)
	}
	return ues
}
