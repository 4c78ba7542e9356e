// SPDX-License-Identifier: Apache-2.0

package noderuntime

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/swiftlane/swiftlane/internal/applier"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// procWithPIDNamespace is a procfs stand-in whose self/ns/pid link reads ns:
// the namespace a process lives in cannot be changed for a unit test.
func procWithPIDNamespace(t *testing.T, ns string) string {
	root := t.TempDir()
	dir := filepath.Join(root, "self", "ns")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(ns, filepath.Join(dir, "pid")); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestPrioritiseSelf(t *testing.T) {
	for _, tc := range []struct {
		name, ns string
		want     bool
	}{
		{"initial PID namespace", initPIDNamespace, true},
		{"pod without hostPID", "pid:[4026532301]", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := applier.NewRecorder()
			a := applier.New(rec, "/proc", t.TempDir(), nil)
			prioritiseSelf(a, procWithPIDNamespace(t, tc.ns), slog.New(slog.DiscardHandler))
			e, ok := rec.Process(uint32(os.Getpid()))
			if ok != tc.want {
				t.Fatalf("own process in the scheduler's map: %v, want %v", ok, tc.want)
			}
			if ok && e.Class != strategy.High {
				t.Errorf("own process class %v, want high", e.Class)
			}
			if got := len(a.Dynamic(selfSource)); got != rec.Processes() {
				t.Errorf("%d dynamic %q entries, %d in the map", got, selfSource, rec.Processes())
			}
		})
	}
}

func TestPrioritiseSelfWithoutProcfs(t *testing.T) {
	rec := applier.NewRecorder()
	prioritiseSelf(applier.New(rec, "/proc", t.TempDir(), nil), t.TempDir(), slog.New(slog.DiscardHandler))
	if rec.Processes() != 0 {
		t.Errorf("an unreadable namespace link gave %d entries, want none", rec.Processes())
	}
}
