// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/swiftlane/swiftlane/internal/lb/labnet"
)

func bpffs(t *testing.T) string {
	t.Helper()
	labnet.RequireRoot(t)
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "bpf", "bpf", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount bpffs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	return dir
}

// A second Load with the same pin directory sees what the first programmed;
// a changed session capacity replaces only the maps sized by it.
func TestPinnedMapsReused(t *testing.T) {
	pins := filepath.Join(bpffs(t), "lb")
	c := testConstants()
	c.PinDir = pins
	fe := Frontend{Addr: vip, Port: 80, Proto: TCP}

	d1 := load(t, c)
	if err := d1.PutBackend(7, ap(backendA, 8080)); err != nil {
		t.Fatal(err)
	}
	if err := d1.PutService(fe, ServiceEntry{ID: 3, Flags: FlagMaglev, Slots: []uint32{7, 7}}, ServiceEntry{}); err != nil {
		t.Fatal(err)
	}
	// A slot beyond the count, as an apply cut short by a crash leaves it.
	if err := d1.objs.BackendSlots.Put(lbSlotKey{SvcId: 3, Slot: 5}, uint32(7)); err != nil {
		t.Fatal(err)
	}
	if err := d1.objs.Sessions.Put(lbFlow{Saddr: addrBE(client), Proto: 6}, lbSession{Saddr: 1}); err != nil {
		t.Fatal(err)
	}
	d1.Close()

	d2 := load(t, c)
	fes, bes, err := d2.Programmed()
	if err != nil {
		t.Fatal(err)
	}
	if e := fes[fe]; len(fes) != 1 || e.ID != 3 || e.Flags != FlagMaglev || len(e.Slots) != 2 || e.Slots[0] != 7 || e.Slots[1] != 7 {
		t.Fatalf("after reload: frontends %+v, want %v -> id 3, maglev, slots [7 7]", fes, fe)
	}
	if len(bes) != 1 || bes[7] != ap(backendA, 8080) {
		t.Fatalf("after reload: backends %v, want 7 -> %v", bes, ap(backendA, 8080))
	}
	var bid uint32
	if err := d2.objs.BackendSlots.Lookup(lbSlotKey{SvcId: 3, Slot: 5}, &bid); err == nil {
		t.Fatalf("orphan slot 5 survived Programmed")
	}
	if n := countSessions(t, d2); n != 1 {
		t.Fatalf("sessions after reload: %d, want the pinned 1", n)
	}
	dirs2, _ := d2.PinnedMaps()
	d2.Close()

	c.SessionEntries = 1024
	d3 := load(t, c)
	dirs3, replaced := d3.PinnedMaps()
	// Both maps sized by sessions.max, and nothing else.
	if !slices.Equal(dirs3, dirs2) || len(replaced) != 2 || !strings.HasPrefix(replaced[0], "affinity ") || !strings.HasPrefix(replaced[1], "sessions ") {
		t.Fatalf("capacity change: dirs %v (were %v), replaced %v; want the same dirs and only affinity and sessions replaced", dirs3, dirs2, replaced)
	}
	if n := countSessions(t, d3); n != 0 {
		t.Fatalf("replaced session map holds %d entries, want 0", n)
	}
	if fes, _, _ := d3.Programmed(); len(fes) != 1 {
		t.Fatalf("services lost with the session map: %v", fes)
	}
	// Another build's copy of a map goes once this one is current.
	old := filepath.Join(pins, "maps", "sessions-000000000000")
	if err := os.Mkdir(old, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := RemoveStaleMaps(pins, dirs3); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatalf("stale map directory %s kept (%v)", old, err)
	}
	for _, d := range dirs3 {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("current map directory removed: %v", err)
		}
	}
}

// A build that changed one map's layout starts that map empty and reuses
// every other one: an upgrade adding a counter keeps the sessions.
func TestLayoutChangeReplacesOnlyThatMap(t *testing.T) {
	pins := filepath.Join(bpffs(t), "lb")
	open := func(spec *ebpf.CollectionSpec) map[string]*ebpf.Map {
		t.Helper()
		maps, _, replaced, err := openPinned(spec, pins, nil)
		if err != nil || len(replaced) != 0 {
			t.Fatalf("openPinned: %v (replaced %v)", err, replaced)
		}
		t.Cleanup(func() {
			for _, m := range maps {
				m.Close()
			}
		})
		return maps
	}
	spec, err := loadLb()
	if err != nil {
		t.Fatal(err)
	}
	first := open(spec)
	key := lbFlow{Saddr: addrBE(client), Proto: 6}
	if err := first[lbMapSessions].Put(key, lbSession{Saddr: 1}); err != nil {
		t.Fatal(err)
	}
	if err := first[lbMapStats].Put(uint32(0), make([]lbLbStats, mustCPUs(t))); err != nil {
		t.Fatal(err)
	}

	next, err := loadLb()
	if err != nil {
		t.Fatal(err)
	}
	// The stats value gains a field (as when a counter is added).
	st := btf.Copy(next.Maps[lbMapStats].Value).(*btf.Struct)
	st.Members = append(st.Members, btf.Member{Name: "new_counter", Type: st.Members[0].Type, Offset: btf.Bits(st.Size * 8)})
	st.Size += 8
	next.Maps[lbMapStats].Value = st
	next.Maps[lbMapStats].ValueSize = st.Size
	second := open(next)
	var v lbSession
	if err := second[lbMapSessions].Lookup(key, &v); err != nil || v.Saddr != 1 {
		t.Fatalf("sessions not reused across a change to stats only: %+v, %v", v, err)
	}
	if second[lbMapStats].ValueSize() != st.Size {
		t.Fatalf("stats value size %d, want the new layout's %d", second[lbMapStats].ValueSize(), st.Size)
	}
}

func mustCPUs(t *testing.T) int {
	t.Helper()
	n, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func countSessions(t *testing.T, d *Datapath) int {
	t.Helper()
	var k lbFlow
	var v lbSession
	n := 0
	it := d.objs.Sessions.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// The layout hash follows the structure of keys and values, not capacities.
func TestLayoutHash(t *testing.T) {
	spec, err := loadLb()
	if err != nil {
		t.Fatal(err)
	}
	ms := spec.Maps[lbMapSessions]
	base := layoutHash(lbMapSessions, ms)
	ms.MaxEntries *= 2
	if h := layoutHash(lbMapSessions, ms); h != base {
		t.Fatalf("capacity changed the layout hash (%s -> %s)", base, h)
	}
	v := btf.Copy(ms.Value).(*btf.Struct)
	v.Members[0], v.Members[1] = v.Members[1], v.Members[0] // same sizes, fields swapped
	v.Members[0].Offset, v.Members[1].Offset = v.Members[1].Offset, v.Members[0].Offset
	ms.Value = v
	if h := layoutHash(lbMapSessions, ms); h == base {
		t.Fatalf("swapping two fields of struct session kept the layout hash %s", h)
	}
}

func TestCheckPinDir(t *testing.T) {
	err := CheckPinDir(filepath.Join(t.TempDir(), "not", "yet"))
	if err == nil || !strings.Contains(err.Error(), "not on a bpf filesystem") {
		t.Fatalf("tmpfs pin dir: %v, want a 'not on a bpf filesystem' error", err)
	}
}

// The socket collection runs on the tc collection's maps: each map both
// define is one kernel map (one ID), sized as configured; with pinning it
// is pinned once, and the socket collection's own maps beside it. Without
// pinning the IDs show the replacement itself (with it, two collections
// opening the same pins would share IDs too).
func TestSocketProgramsShareTheMaps(t *testing.T) {
	for _, pinned := range []bool{false, true} {
		t.Run(fmt.Sprintf("pinned=%v", pinned), func(t *testing.T) {
			c := testConstants()
			if pinned {
				c.PinDir = filepath.Join(bpffs(t), "lb")
			}
			c.SessionEntries = 1024 // resized in both specs, or the replacement fails
			c.IPv6 = true
			d := load(t, c)
			own := checkSharedMaps(t, d)
			if pinned {
				checkPinnedOnce(t, d, own)
			}
		})
	}
}

// checkSharedMaps checks that the socket programs use the tc program's maps
// and returns the maps they have to themselves.
func checkSharedMaps(t *testing.T, d *Datapath) []string {
	t.Helper()
	tc, sock := mapsByName(&d.objs.lbMaps), mapsByName(&d.sock.sockMaps)
	var shared, own []string
	for name, m := range sock {
		id := mapID(t, m)
		if tm := tc[name]; tm != nil {
			if tid := mapID(t, tm); tid != id {
				t.Errorf("map %s: socket programs use map ID %d, the tc program %d", name, id, tid)
			}
			shared = append(shared, name)
			continue
		}
		for tname, tm := range tc {
			if mapID(t, tm) == id {
				t.Errorf("socket map %s is the tc program's %s", name, tname)
			}
		}
		own = append(own, name)
	}
	slices.Sort(shared)
	slices.Sort(own)
	wantShared := []string{"affinity", "affinity6", "backend_slots", "backends", "backends6", "services", "services6", "src_ranges", "src_ranges6", "stats", "svc_members"}
	if !slices.Equal(shared, wantShared) || !slices.Equal(own, []string{"sock_rev", "sock_rev6"}) {
		t.Fatalf("socket maps: shared %v, own %v; want shared %v, own [sock_rev sock_rev6]", shared, own, wantShared)
	}
	if n := d.sock.Affinity.MaxEntries(); n != 512 {
		t.Errorf("shared affinity map holds %d entries, want 512 (sessions 1024 / 2)", n)
	}
	return own
}

// checkPinnedOnce checks that every map but the sweep's batches is pinned,
// each once.
func checkPinnedOnce(t *testing.T, d *Datapath, sockOwn []string) {
	t.Helper()
	dirs, _ := d.PinnedMaps()
	pinned := map[string]int{}
	for _, dir := range dirs {
		name := filepath.Base(dir)
		pinned[name[:strings.LastIndex(name, "-")]]++
	}
	for name := range mapsByName(&d.objs.lbMaps) {
		want := 1
		if strings.HasPrefix(name, "sweep_") { // each process's own
			want = 0
		}
		if pinned[name] != want {
			t.Errorf("tc map %s pinned %d times, want %d", name, pinned[name], want)
		}
	}
	for _, name := range sockOwn {
		if pinned[name] != 1 {
			t.Errorf("socket map %s pinned %d times, want once", name, pinned[name])
		}
	}
	if len(pinned) != len(dirs) {
		t.Errorf("pinned map directories %v: a map is pinned twice", dirs)
	}
}

// mapsByName are the maps of a generated *Maps struct by their ELF names.
func mapsByName(maps any) map[string]*ebpf.Map {
	out := map[string]*ebpf.Map{}
	v := reflect.ValueOf(maps).Elem()
	for i := range v.NumField() {
		if m, ok := v.Field(i).Interface().(*ebpf.Map); ok {
			out[v.Type().Field(i).Tag.Get("ebpf")] = m
		}
	}
	return out
}

func mapID(t *testing.T, m *ebpf.Map) ebpf.MapID {
	t.Helper()
	info, err := m.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, ok := info.ID()
	if !ok {
		t.Fatal("map ID not available (Linux >= 4.13)")
	}
	return id
}
