// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// Pinning keeps the datapath's state across restarts of `swiftlane lb`:
//
//	<pin dir>/maps/<map>-<layout>/<map>   each map (sessions, services, backends, ...)
//	<pin dir>/links/<ifindex>             the TCX attachment of each interface
//
// The socket collection (sock.bpf.c) pins its own maps there too; the maps
// it shares with the tc collection are the tc collection's, pinned once.
//
// A restarted process loads its program against the pinned maps and switches
// the pinned links to it in one atomic step, so the old program serves every
// packet until the new one takes over and both see the same sessions.
//
// <layout> is a hash of that map's type, key and value sizes, flags and the
// BTF structure of its key and value. A build that changed a map's layout
// pins a new copy of that map only, starting empty, instead of misreading
// the old one; every other map is reused. So an upgrade that, say, adds a
// counter keeps every session, and one that changes struct session or
// struct flow loses open connections once. A capacity change (sessions.max)
// replaces the maps sized by it, also starting them empty.

// layoutEpoch is mixed into the layout hash. Bump it when the meaning of a
// field changes without its layout changing (a flag bit reused, a unit).
const layoutEpoch = 1

const bpfFSMagic = 0xcafe4a11

// CheckPinDir returns an error naming the fix unless dir is on a bpf
// filesystem (its nearest existing ancestor is checked, so dir itself may
// not exist yet).
func CheckPinDir(dir string) error {
	p := filepath.Clean(dir)
	for {
		var st unix.Statfs_t
		err := unix.Statfs(p, &st)
		if err == nil {
			if uint32(st.Type) != bpfFSMagic {
				return fmt.Errorf("pin directory %s is not on a bpf filesystem (%s is not bpffs): mount one with `mount -t bpf bpf /sys/fs/bpf`, choose a directory on one, or disable pinning with an empty pin directory", dir, p)
			}
			return nil
		}
		if !errors.Is(err, unix.ENOENT) || p == "/" {
			return fmt.Errorf("pin directory %s: %w", dir, err)
		}
		p = filepath.Dir(p)
	}
}

// pinnedMaps are the maps a restart keeps: all but the constants and the
// sweep's scratch batches, which each process must have to itself.
func pinnedMaps(spec *ebpf.CollectionSpec) []string {
	var names []string
	for name := range spec.Maps {
		if !strings.HasPrefix(name, ".") && !strings.HasPrefix(name, "sweep_") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// layoutHash identifies one map's layout. Its capacity is left out on
// purpose (see above).
func layoutHash(name string, m *ebpf.MapSpec) string {
	h := sha256.New()
	fmt.Fprintf(h, "epoch %d\n%s %v %d %d %#x ", layoutEpoch, name, m.Type, m.KeySize, m.ValueSize, m.Flags)
	writeLayout(h, m.Key)
	io.WriteString(h, " ")
	writeLayout(h, m.Value)
	return hex.EncodeToString(h.Sum(nil))[:12]
}

func writeLayout(w io.Writer, t btf.Type) {
	switch v := btf.UnderlyingType(t).(type) {
	case nil:
		io.WriteString(w, "?")
	case *btf.Struct:
		fmt.Fprintf(w, "struct %s %d{", v.Name, v.Size)
		for _, m := range v.Members {
			fmt.Fprintf(w, "%s@%d:%d ", m.Name, m.Offset, m.BitfieldSize)
			writeLayout(w, m.Type)
			io.WriteString(w, ";")
		}
		io.WriteString(w, "}")
	case *btf.Int:
		fmt.Fprintf(w, "int%d", v.Size)
	case *btf.Array:
		fmt.Fprintf(w, "[%d]", v.Nelems)
		writeLayout(w, v.Type)
	default:
		fmt.Fprintf(w, "%T", v)
	}
}

// openPinned opens (or creates and pins) each pinned map of spec under
// pinDir but those of shared (another collection's, pinned with it),
// replacing a pinned map the spec cannot reuse (a changed capacity). It
// returns the maps to load the collection with, their directories, and the
// maps that start empty because of a replacement (with the reason).
func openPinned(spec *ebpf.CollectionSpec, pinDir string, shared map[string]*ebpf.Map) (map[string]*ebpf.Map, []string, []string, error) {
	if err := CheckPinDir(pinDir); err != nil {
		return nil, nil, nil, err
	}
	maps := map[string]*ebpf.Map{}
	var dirs, replaced []string
	fail := func(err error) (map[string]*ebpf.Map, []string, []string, error) {
		for _, m := range maps {
			m.Close()
		}
		return nil, nil, nil, err
	}
	for _, name := range pinnedMaps(spec) {
		if shared[name] != nil {
			continue
		}
		ms := spec.Maps[name].Copy()
		ms.Pinning = ebpf.PinByName
		dir := filepath.Join(pinDir, "maps", name+"-"+layoutHash(name, ms))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fail(fmt.Errorf("pin directory: %w", err))
		}
		opts := ebpf.MapOptions{PinPath: dir}
		m, err := ebpf.NewMapWithOptions(ms, opts)
		if errors.Is(err, ebpf.ErrMapIncompatible) {
			if rerr := os.Remove(filepath.Join(dir, ms.Name)); rerr != nil {
				return fail(fmt.Errorf("replace pinned map %s: %w", name, rerr))
			}
			replaced = append(replaced, fmt.Sprintf("%s (%v)", name, err))
			m, err = ebpf.NewMapWithOptions(ms, opts)
		}
		if err != nil {
			return fail(fmt.Errorf("pinned map %s in %s: %w", name, dir, err))
		}
		maps[name] = m
		dirs = append(dirs, dir)
	}
	return maps, dirs, replaced, nil
}

// RemoveStaleMaps unpins map directories other than current (other
// layouts, left by another build); call it once every link runs this
// build's program. A program still attached somewhere keeps its own maps
// alive until it is detached.
func RemoveStaleMaps(pinDir string, current []string) error {
	dirs, err := filepath.Glob(filepath.Join(pinDir, "maps", "*"))
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		if !slices.Contains(current, d) {
			errs = append(errs, os.RemoveAll(d))
		}
	}
	return errors.Join(errs...)
}

// LinkPinPath is where the attachment to ifindex is pinned.
func LinkPinPath(pinDir string, ifindex int) string {
	return filepath.Join(pinDir, "links", fmt.Sprint(ifindex))
}
