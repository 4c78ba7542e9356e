// SPDX-License-Identifier: Apache-2.0

package schedext

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestStatPolicy(t *testing.T) {
	// A stat line of a SCHED_DEADLINE sleep in the kernel's layout (policy 6,
	// field 41), and one whose command holds spaces and a parenthesis.
	line := "125 (sleep) S 118 118 1 34816 118 4194304 105 0 0 0 0 0 0 0 -101 0 1 0 1022 2564096 245 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 6 0 0 0 0 0 0 0 0 0 0 0"
	comm, policy, ok := statPolicy(line)
	if !ok || comm != "sleep" || policy != 6 {
		t.Fatalf("statPolicy = %q %d %v, want sleep 6 true", comm, policy, ok)
	}
	comm, policy, ok = statPolicy(strings.Replace(line, "(sleep)", "(a b) c)", 1))
	if !ok || comm != "a b) c" || policy != 6 {
		t.Fatalf("statPolicy = %q %d %v", comm, policy, ok)
	}
	if _, _, ok := statPolicy("125 (sleep) S 118"); ok {
		t.Fatal("a short line parsed")
	}
}

// DeadlineTasks over a /proc tree with one SCHED_DEADLINE thread among
// other ones (its reservation is left zero: sched_getattr needs a real tid).
func TestDeadlineTasksFindsPolicy(t *testing.T) {
	root := t.TempDir()
	write := func(pid, tid, comm string, policy string) {
		dir := filepath.Join(root, pid, "task", tid)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		f := strings.Fields("S 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0")
		f[41-3] = policy
		os.WriteFile(filepath.Join(dir, "stat"), []byte(pid+" ("+comm+") "+strings.Join(f, " ")), 0o644)
	}
	write("10", "10", "nginx", "0")
	write("20", "20", "gnb", "0")
	write("20", "23", "gnb-slot", "6")
	write("30", "30", "fifo", "1")
	got, err := DeadlineTasks(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].PID != 20 || got[0].TID != 23 || got[0].Comm != "gnb-slot" {
		t.Fatalf("DeadlineTasks = %+v, want the one thread 20/23 gnb-slot", got)
	}
}

func TestDeadlineHint(t *testing.T) {
	h := DeadlineHint([]DeadlineTask{
		{PID: 125, TID: 125, Comm: "sleep", Runtime: 950 * time.Millisecond, Period: time.Second},
		{PID: 126, TID: 127, Comm: "gnb", Runtime: 9 * time.Millisecond, Period: 10 * time.Millisecond},
	})
	for _, want := range []string{"2 SCHED_DEADLINE threads reserve 185 %", "125/125 sleep 95 %", "126/127 gnb 90 %", "lower their runtime"} {
		if !strings.Contains(h, want) {
			t.Errorf("hint %q lacks %q", h, want)
		}
	}
	if h := DeadlineHint(nil); !strings.Contains(h, "no SCHED_DEADLINE task runs now") {
		t.Errorf("hint without tasks: %q", h)
	}
}
