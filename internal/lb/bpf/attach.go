// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"errors"
	"fmt"
	"io"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// AttachIngress attaches prog at tc ingress of the interface, using TCX
// (kernel >= 6.6) and falling back to a clsact qdisc with a direct-action
// filter. The interface is resolved in the calling thread's network
// namespace. Closing the result detaches.
func AttachIngress(prog *ebpf.Program, ifindex int) (io.Closer, error) {
	l, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: ebpf.AttachTCXIngress})
	if err == nil {
		return l, nil
	}
	if !errors.Is(err, ebpf.ErrNotSupported) {
		return nil, fmt.Errorf("attach tcx ingress to ifindex %d: %w", ifindex, err)
	}
	return attachClsact(prog, ifindex)
}

type clsactFilter struct{ f *netlink.BpfFilter }

func (c clsactFilter) Close() error { return netlink.FilterDel(c.f) }

func attachClsact(prog *ebpf.Program, ifindex int) (io.Closer, error) {
	q := &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
		QdiscType:  "clsact",
	}
	if err := netlink.QdiscAdd(q); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("add clsact qdisc to ifindex %d: %w", ifindex, err)
	}
	f := &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: ifindex,
			Parent:    netlink.HANDLE_MIN_INGRESS,
			Handle:    1,
			Protocol:  unix.ETH_P_ALL,
			Priority:  1,
		},
		Fd:           prog.FD(),
		Name:         "swiftlane_lb",
		DirectAction: true,
	}
	if err := netlink.FilterReplace(f); err != nil {
		return nil, fmt.Errorf("add tc ingress filter to ifindex %d: %w", ifindex, err)
	}
	return clsactFilter{f}, nil
}
