// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// filterName names our clsact filters, so Cleanup finds them.
const filterName = "swiftlane_lb"

// Attachment is the program attached to one interface.
type Attachment interface {
	// Close releases this process's hold: it detaches an unpinned
	// attachment and leaves a pinned one serving.
	Close() error
	// Remove detaches and unpins.
	Remove() error
}

// AttachIngress attaches prog at tc ingress of the interface, using TCX
// (kernel >= 6.6) and falling back to a clsact qdisc with a direct-action
// filter. The interface is resolved in the calling thread's network
// namespace.
//
// With pinPath (LinkPinPath), the attachment outlives the process: a link
// already pinned there for this interface is switched to prog atomically
// (the previous program handles every packet up to the switch), otherwise
// the new link is pinned there.
func AttachIngress(prog *ebpf.Program, ifindex int, pinPath string) (Attachment, error) {
	if pinPath != "" {
		if a, err := reusePinned(prog, ifindex, pinPath); a != nil || err != nil {
			return a, err
		}
	}
	l, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: ebpf.AttachTCXIngress})
	if errors.Is(err, ebpf.ErrNotSupported) {
		return attachClsact(prog, ifindex, pinPath != "")
	}
	if err != nil {
		return nil, fmt.Errorf("attach tcx ingress to ifindex %d: %w", ifindex, err)
	}
	if err := pinLink(l, pinPath); err != nil {
		return nil, fmt.Errorf("ifindex %d: %w", ifindex, err)
	}
	return tcxAttachment{l}, nil
}

// pinLink pins l at path (none if empty), creating its directory; on
// failure l is closed (detached).
func pinLink(l link.Link, path string) error {
	if path == "" {
		return nil
	}
	err := os.MkdirAll(filepath.Dir(path), 0o700)
	if err == nil {
		err = l.Pin(path)
	}
	if err != nil {
		l.Close()
		return fmt.Errorf("pin link %s: %w", path, err)
	}
	return nil
}

// reusePinned switches the link pinned at path to prog if it is a TCX
// ingress link of ifindex; a pin left by an interface that went away (its
// index possibly reused since) is removed. (nil, nil): nothing to reuse.
func reusePinned(prog *ebpf.Program, ifindex int, path string) (Attachment, error) {
	l, err := link.LoadPinnedLink(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pinned link %s: %w", path, err)
	}
	info, err := l.Info()
	if err == nil {
		if tcx := info.TCX(); tcx != nil && int(tcx.Ifindex) == ifindex && uint32(tcx.AttachType) == uint32(ebpf.AttachTCXIngress) {
			if err := l.Update(prog); err != nil {
				l.Close()
				return nil, fmt.Errorf("switch pinned link %s to the new program: %w", path, err)
			}
			return tcxAttachment{l}, nil
		}
	}
	// Stale: detach whatever it is and start over.
	l.Unpin()
	l.Close()
	return nil, nil
}

type tcxAttachment struct{ l link.Link }

func (a tcxAttachment) Close() error { return a.l.Close() }

func (a tcxAttachment) Remove() error {
	if err := a.l.Unpin(); err != nil { // a no-op when not pinned
		return err
	}
	return a.l.Close()
}

type clsactFilter struct {
	f    *netlink.BpfFilter
	keep bool
}

func (c clsactFilter) Close() error {
	if c.keep {
		return nil
	}
	return netlink.FilterDel(c.f)
}

func (c clsactFilter) Remove() error { return netlink.FilterDel(c.f) }

// attachClsact replaces our filter in one netlink request, so a restarted
// process takes over from the previous program without a gap. Filters are
// not pinned: they stay until deleted (keep: Close leaves them).
func attachClsact(prog *ebpf.Program, ifindex int, keep bool) (Attachment, error) {
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
		Name:         filterName,
		DirectAction: true,
	}
	if err := netlink.FilterReplace(f); err != nil {
		return nil, fmt.Errorf("add tc ingress filter to ifindex %d: %w", ifindex, err)
	}
	return clsactFilter{f, keep}, nil
}

// Cleanup detaches everything a pinned load balancer left behind: the
// pinned links under pinDir, our clsact filters on the interfaces of the
// calling thread's network namespace, and the pinned maps.
func Cleanup(pinDir string) error {
	var errs []error
	links, _ := filepath.Glob(filepath.Join(pinDir, "links", "*"))
	for _, p := range links {
		l, err := link.LoadPinnedLink(p, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("pinned link %s: %w", p, err))
			continue
		}
		errs = append(errs, tcxAttachment{l}.Remove())
	}
	ifs, err := netlink.LinkList()
	if err != nil {
		errs = append(errs, fmt.Errorf("list interfaces: %w", err))
	}
	for _, l := range ifs {
		fs, err := netlink.FilterList(l, netlink.HANDLE_MIN_INGRESS)
		if err != nil {
			continue // no clsact qdisc
		}
		for _, f := range fs {
			if bf, ok := f.(*netlink.BpfFilter); ok && bf.Name == filterName {
				errs = append(errs, netlink.FilterDel(bf))
			}
		}
	}
	if err := os.RemoveAll(pinDir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// RemoveStaleLinks detaches and unpins the links under pinDir whose
// interface index is not in keep: interfaces a previous process attached
// to that no longer match the configuration.
func RemoveStaleLinks(pinDir string, keep map[int]bool) error {
	paths, _ := filepath.Glob(filepath.Join(pinDir, "links", "*"))
	var errs []error
	for _, p := range paths {
		var idx int
		if _, err := fmt.Sscan(filepath.Base(p), &idx); err == nil && keep[idx] {
			continue
		}
		l, err := link.LoadPinnedLink(p, nil)
		if err != nil {
			errs = append(errs, os.Remove(p))
			continue
		}
		errs = append(errs, tcxAttachment{l}.Remove())
	}
	return errors.Join(errs...)
}
