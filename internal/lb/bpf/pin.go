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
//	<pin dir>/maps-<layout>/<map>   every map (sessions, services, backends, ...)
//	<pin dir>/links/<ifindex>       the TCX attachment of each interface
//
// A restarted process loads its program against the pinned maps and switches
// the pinned links to it in one atomic step, so the old program serves every
// packet until the new one takes over and both see the same sessions.
//
// <layout> is a hash of the maps' types and key/value layouts (from BTF): a
// build whose maps are laid out differently pins into a new directory and
// starts with empty maps instead of misreading the old ones (its program
// replaces the old one on the links, so open connections are lost once, on
// that upgrade only). A capacity change (sessions.max) keeps the directory
// but replaces that one map, also starting it empty.

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

// pinnedMaps are the maps a restart keeps: all but the constants.
func pinnedMaps(spec *ebpf.CollectionSpec) []string {
	var names []string
	for name := range spec.Maps {
		if !strings.HasPrefix(name, ".") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// layoutHash identifies the maps' layout: type, key and value sizes, flags and
// the BTF structure of keys and values. Capacities are left out on purpose
// (see above).
func layoutHash(spec *ebpf.CollectionSpec) string {
	h := sha256.New()
	fmt.Fprintf(h, "epoch %d\n", layoutEpoch)
	for _, name := range pinnedMaps(spec) {
		m := spec.Maps[name]
		fmt.Fprintf(h, "%s %v %d %d %#x ", name, m.Type, m.KeySize, m.ValueSize, m.Flags)
		writeLayout(h, m.Key)
		io.WriteString(h, " ")
		writeLayout(h, m.Value)
		io.WriteString(h, "\n")
	}
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

// preparePins makes the maps directory for spec's layout and removes pinned
// maps the spec cannot reuse (a changed capacity). It returns the directory
// and the names of the maps that start empty because of that.
func preparePins(spec *ebpf.CollectionSpec, pinDir string) (string, []string, error) {
	if err := CheckPinDir(pinDir); err != nil {
		return "", nil, err
	}
	dir := filepath.Join(pinDir, "maps-"+layoutHash(spec))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("pin directory: %w", err)
	}
	var replaced []string
	for _, name := range pinnedMaps(spec) {
		ms := spec.Maps[name]
		ms.Pinning = ebpf.PinByName
		path := filepath.Join(dir, name)
		m, err := ebpf.LoadPinnedMap(path, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err == nil {
			err = ms.Compatible(m)
			m.Close()
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, ebpf.ErrMapIncompatible) {
			return "", nil, fmt.Errorf("pinned map %s: %w", path, err)
		}
		if err := os.Remove(path); err != nil {
			return "", nil, fmt.Errorf("replace pinned map %s: %w", path, err)
		}
		replaced = append(replaced, fmt.Sprintf("%s (%v)", name, err))
	}
	return dir, replaced, nil
}

// RemoveStaleMaps unpins map directories of other layouts, left by an older
// build; call it once every link runs this build's program. A program still
// attached somewhere keeps its own maps alive until it is detached.
func RemoveStaleMaps(pinDir, current string) error {
	dirs, err := filepath.Glob(filepath.Join(pinDir, "maps-*"))
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		if d != current {
			errs = append(errs, os.RemoveAll(d))
		}
	}
	return errors.Join(errs...)
}

// LinkPinPath is where the attachment to ifindex is pinned.
func LinkPinPath(pinDir string, ifindex int) string {
	return filepath.Join(pinDir, "links", fmt.Sprint(ifindex))
}
