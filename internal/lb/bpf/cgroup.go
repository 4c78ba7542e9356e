// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// The node's own connections are balanced by the cgroup programs of
// sock.bpf.c, attached to a cgroup v2 directory: every socket made by a
// process in it or below, in the network namespace AttachCgroup is called
// from, has a frontend address replaced by a backend's at connect and
// sendmsg, and the frontend shown again to recvmsg and getpeername.

// soNetnsCookie is SO_NETNS_COOKIE (Linux >= 5.14), which x/sys/unix
// does not name.
const soNetnsCookie = 71

type cgroupHook struct {
	name   string // of its pin
	prog   *ebpf.Program
	attach ebpf.AttachType
}

// cgroupHooks are the socket programs and where each attaches.
func (d *Datapath) cgroupHooks() []cgroupHook {
	o := &d.sock
	return []cgroupHook{
		{"connect4", o.SockConnect4, ebpf.AttachCGroupInet4Connect},
		{"connect6", o.SockConnect6, ebpf.AttachCGroupInet6Connect},
		{"sendmsg4", o.SockSendmsg4, ebpf.AttachCGroupUDP4Sendmsg},
		{"sendmsg6", o.SockSendmsg6, ebpf.AttachCGroupUDP6Sendmsg},
		{"recvmsg4", o.SockRecvmsg4, ebpf.AttachCGroupUDP4Recvmsg},
		{"recvmsg6", o.SockRecvmsg6, ebpf.AttachCGroupUDP6Recvmsg},
		{"getpeername4", o.SockGetpeername4, ebpf.AttachCgroupInet4GetPeername},
		{"getpeername6", o.SockGetpeername6, ebpf.AttachCgroupInet6GetPeername},
	}
}

// CgroupAttachment is the socket programs attached to one cgroup.
type CgroupAttachment struct{ links []link.Link }

// Close releases this process's hold: unpinned links detach, pinned ones
// keep translating.
func (a *CgroupAttachment) Close() error {
	var errs []error
	for _, l := range a.links {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}

// AttachCgroup attaches the socket programs to the cgroup v2 directory
// cgroup and translates the sockets of the calling thread's network
// namespace (the node's). With pinDir, the links are pinned under
// CgroupPinDir and outlive the process; links a previous process pinned
// there for the same cgroup are switched to this program atomically, and
// ones for another cgroup are detached.
func (d *Datapath) AttachCgroup(cgroup, pinDir string) (*CgroupAttachment, error) {
	cookie, err := netnsCookie()
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Stat(cgroup, &st); err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", cgroup, err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(cgroup, &fs); err != nil || fs.Type != unix.CGROUP2_SUPER_MAGIC {
		return nil, fmt.Errorf("cgroup %s: not a cgroup v2 directory (mount -t cgroup2 shows where the hierarchy is)", cgroup)
	}
	if err := d.sock.HostNetnsCookie.Set(cookie); err != nil {
		return nil, fmt.Errorf("set the node's network namespace: %w", err)
	}
	a := &CgroupAttachment{}
	for _, h := range d.cgroupHooks() {
		pin := ""
		if pinDir != "" {
			pin = filepath.Join(CgroupPinDir(pinDir), h.name)
		}
		l, err := attachCgroupHook(cgroup, st.Ino, h.prog, h.attach, pin)
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("attach %s to cgroup %s: %w", h.name, cgroup, err)
		}
		a.links = append(a.links, l)
	}
	return a, nil
}

// attachCgroupHook reuses the link pinned at pin if it is on the cgroup
// with id cgroupID, else attaches anew (and pins, with a pin path).
func attachCgroupHook(cgroup string, cgroupID uint64, prog *ebpf.Program, attach ebpf.AttachType, pin string) (link.Link, error) {
	if pin != "" {
		if l, err := link.LoadPinnedLink(pin, nil); err == nil {
			info, err := l.Info()
			if err == nil && info.Cgroup() != nil && info.Cgroup().CgroupId == cgroupID {
				if err := l.Update(prog); err != nil {
					l.Close()
					return nil, fmt.Errorf("switch pinned link %s to the new program: %w", pin, err)
				}
				return l, nil
			}
			// Another cgroup (the setting changed): detach it.
			l.Unpin()
			l.Close()
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("pinned link %s: %w", pin, err)
		}
	}
	l, err := link.AttachCgroup(link.CgroupOptions{Path: cgroup, Attach: attach, Program: prog})
	if err != nil {
		return nil, err
	}
	if err := pinLink(l, pin); err != nil {
		return nil, err
	}
	return l, nil
}

// CgroupPinDir is where AttachCgroup pins its links under a pin directory.
func CgroupPinDir(pinDir string) string { return filepath.Join(pinDir, "cgroup") }

// DetachCgroup detaches the socket programs a previous process pinned under
// pinDir (host traffic turned off since).
func DetachCgroup(pinDir string) error {
	dir := CgroupPinDir(pinDir)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	// A pinned link is detached when its last reference, the pin, goes.
	return os.RemoveAll(dir)
}

// netnsCookie identifies the calling thread's network namespace as
// bpf_get_netns_cookie does.
func netnsCookie() (uint64, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("network namespace cookie: %w", err)
	}
	defer unix.Close(fd)
	c, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, soNetnsCookie)
	if err != nil {
		return 0, fmt.Errorf("network namespace cookie (SO_NETNS_COOKIE, Linux >= 5.14): %w", err)
	}
	return c, nil
}

// CgroupRoot is the mount point of the cgroup v2 hierarchy as this process
// sees it (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid setup).
// In a container with its own cgroup namespace that is the container's
// cgroup, not the node's: mount the host's hierarchy and name it instead.
func CgroupRoot() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		fields := strings.Fields(sc.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 {
				return fields[4], nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errors.New("no cgroup v2 hierarchy is mounted (mount -t cgroup2 none /sys/fs/cgroup)")
}
