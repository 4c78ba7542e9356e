// SPDX-License-Identifier: Apache-2.0

package schedext

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// DeadlineTask is a thread running SCHED_DEADLINE and the CPU time it has
// reserved: admission control holds Runtime every Period for it, whether
// it runs or sleeps.
type DeadlineTask struct {
	PID, TID        int
	Comm            string
	Runtime, Period time.Duration
}

// Share is the fraction of one CPU the task reserves.
func (d DeadlineTask) Share() float64 {
	if d.Period <= 0 {
		return 0
	}
	return float64(d.Runtime) / float64(d.Period)
}

// DeadlineTasks lists the SCHED_DEADLINE threads under procRoot (/proc):
// what holds the bandwidth a BusyAtEnable exit found missing. Threads that
// exit while it reads are skipped.
func DeadlineTasks(procRoot string) ([]DeadlineTask, error) {
	stats, err := filepath.Glob(filepath.Join(procRoot, "[0-9]*", "task", "[0-9]*", "stat"))
	if err != nil {
		return nil, err
	}
	var out []DeadlineTask
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		comm, policy, ok := statPolicy(string(b))
		if !ok || policy != unix.SCHED_DEADLINE {
			continue
		}
		taskDir := filepath.Dir(path)
		tid, _ := strconv.Atoi(filepath.Base(taskDir))
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(taskDir))))
		d := DeadlineTask{PID: pid, TID: tid, Comm: comm}
		if a, err := unix.SchedGetAttr(tid, 0); err == nil {
			d.Runtime, d.Period = time.Duration(a.Runtime), time.Duration(a.Period)
			if d.Period == 0 { // the period defaults to the deadline
				d.Period = time.Duration(a.Deadline)
			}
		}
		out = append(out, d)
	}
	return out, nil
}

// statPolicy reads the command and the scheduling policy (field 41) from a
// /proc/PID/task/TID/stat line; the command, in parentheses, may hold
// spaces and parentheses itself.
func statPolicy(stat string) (comm string, policy int, ok bool) {
	open, end := strings.IndexByte(stat, '('), strings.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return "", 0, false
	}
	f := strings.Fields(stat[end+1:]) // from field 3 (state) on
	if len(f) < 41-2 {
		return "", 0, false
	}
	p, err := strconv.Atoi(f[41-3])
	return stat[open+1 : end], p, err == nil
}

// DeadlineHint says what to do about a BusyAtEnable exit, given the
// SCHED_DEADLINE threads running now.
func DeadlineHint(tasks []DeadlineTask) string {
	const server = "sched_ext's deadline server (50 ms per second of each CPU by default) found no deadline bandwidth left"
	if len(tasks) == 0 {
		return server + ", and no SCHED_DEADLINE task runs now: the next try may succeed; if it stays refused, " +
			"the kernel's deadline accounting is off (it is rebuilt when a CPU goes offline and back)"
	}
	var total float64
	var each []string
	for _, d := range tasks {
		total += d.Share()
		if len(each) < 8 {
			each = append(each, fmt.Sprintf("%d/%d %s %.0f %%", d.PID, d.TID, d.Comm, 100*d.Share()))
		}
	}
	if len(tasks) > len(each) {
		each = append(each, fmt.Sprintf("and %d more", len(tasks)-len(each)))
	}
	return fmt.Sprintf("%s: %d SCHED_DEADLINE threads reserve %.0f %% of a CPU in all (pid/tid: %s); "+
		"stop some or lower their runtime so the server fits", server, len(tasks), 100*total, strings.Join(each, ", "))
}
