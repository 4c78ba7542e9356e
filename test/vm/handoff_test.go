// SPDX-License-Identifier: Apache-2.0
//go:build vmtest

package vm

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// handoffSpin is how long the helper's waker runs on after waking its peer.
const handoffSpin = 40 * time.Millisecond

// A critical task woken by a critical task that usually sleeps right after
// waking it waits on the waker's CPU (the hand-off). A waker that goes on
// running this once must not hold the wakee for the rest of its slice: the
// strategy gives both threads a 100 ms slice, the waker spins handoffSpin
// after each wakeup, and the wakee must run long before the spin ends (the
// hand-off cuts the waker's slice to the minimal one, which the next tick
// ends). Without that cut the wakee waited the whole spin.
func TestCriticalHandoffBoundsWaker(t *testing.T) {
	const marker = "swl-helper-handoff"
	p := startScheduler(t, fmt.Sprintf(`strategies:
  - name: pair
    class: critical
    execution_time: 100000000
    command_regex: %q
`, marker))
	before := p.scrape(t)["swiftlane_dispatch_total{path=handoff}"]

	// Go's own preemption of the spinning thread (a signal after 10 ms, then
	// a sleep until its goroutine is handed back) would let the wakee run
	// and hide what this test looks for.
	stdin, lines := startHelper(t, "handoff", marker, "GODEBUG=asyncpreemptoff=1")
	if !lines.Scan() || lines.Text() != "started" {
		t.Fatalf("helper said %q, want started", lines.Text())
	}
	p.waitMetric(t, "the helper to be matched", func(m map[string]float64) bool {
		return m["swiftlane_strategy_processes{class=critical}"] == 1
	})
	fmt.Fprintln(stdin, "go")
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "waits ") {
		t.Fatalf("helper said %q, want waits ...", lines.Text())
	}
	var waits []time.Duration
	for _, f := range strings.Fields(strings.TrimPrefix(lines.Text(), "waits ")) {
		us, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			t.Fatalf("helper's wait %q: %v", f, err)
		}
		waits = append(waits, time.Duration(us)*time.Microsecond)
	}
	if len(waits) == 0 {
		t.Fatal("the helper reported no wakeups")
	}
	handoffs := p.scrape(t)["swiftlane_dispatch_total{path=handoff}"] - before
	slices.Sort(waits)
	median := waits[len(waits)/2]
	t.Logf("%d wakeups of the critical wakee while its waker spun %v: median wait %v, shortest %v, longest %v; %.0f hand-offs; all: %v",
		len(waits), handoffSpin, median, waits[0], waits[len(waits)-1], handoffs, waits)
	// The warm-up round trips before each spin are hand-offs too.
	if handoffs < float64(len(waits)) {
		t.Fatalf("%.0f hand-offs for %d wakeups: the pair did not take the hand-off path", handoffs, len(waits))
	}
	if median >= handoffSpin/2 {
		t.Fatalf("the wakee waited %v (median) while its waker spun %v: the hand-off held it for the waker's slice", median, handoffSpin)
	}
}

// handoffHelper runs a waker and a wakee, each on an OS thread of its own,
// talking over pipes (whose wakeups are sync wakeups). Told "go", it runs
// trials: round trips in which both sleep right after waking the other (the
// pattern the hand-off is for), then one wakeup after which the waker spins
// handoffSpin. It prints how long the wakee took to run after each of those
// wakeups, in µs.
func handoffHelper() int {
	in := bufio.NewScanner(os.Stdin)
	fmt.Println("started")
	if !in.Scan() || in.Text() != "go" {
		return 1
	}
	var ab, ba [2]int
	if err := unix.Pipe(ab[:]); err != nil {
		return 1
	}
	if err := unix.Pipe(ba[:]); err != nil {
		return 1
	}
	base := time.Now()
	waits := make(chan []int64)
	go func() { // the wakee
		runtime.LockOSThread()
		buf := make([]byte, 8)
		var out []int64
		for {
			if n, err := unix.Read(ab[0], buf); err != nil || n != len(buf) {
				break
			}
			sent := int64(binary.LittleEndian.Uint64(buf))
			if sent < 0 {
				break
			}
			if sent > 0 {
				out = append(out, (int64(time.Since(base))-sent)/1000)
			}
			if _, err := unix.Write(ba[1], buf[:1]); err != nil {
				break
			}
		}
		waits <- out
	}()
	runtime.LockOSThread() // the waker
	buf, one := make([]byte, 8), make([]byte, 1)
	send := func(v int64) {
		binary.LittleEndian.PutUint64(buf, uint64(v))
		unix.Write(ab[1], buf)
	}
	settle := unix.NsecToTimespec((2 * time.Millisecond).Nanoseconds())
	pause := unix.NsecToTimespec((30 * time.Millisecond).Nanoseconds())
	start := time.Now()
	sink += spin(1 << 24)
	spinIters := int(float64(1<<24) * float64(handoffSpin) / float64(time.Since(start)))
	for range 15 {
		for range 20 {
			send(0)
			unix.Read(ba[0], one)
		}
		// The wakee is asleep in read by then, wherever it ran: the
		// measured message wakes it rather than finding it running.
		unix.Nanosleep(&settle, nil)
		send(int64(time.Since(base)))
		sink += spin(spinIters)
		unix.Read(ba[0], one)
		unix.Nanosleep(&pause, nil) // lets the critical budget refill
	}
	send(-1)
	out := <-waits
	s := make([]string, len(out))
	for i, us := range out {
		s[i] = strconv.FormatInt(us, 10)
	}
	fmt.Println("waits " + strings.Join(s, " "))
	return 0
}

// sink keeps spin's result, so the compiler keeps its loop.
var sink int

// spin runs n rounds of arithmetic with no function call inside: the Go
// runtime preempts a goroutine that ran 10 ms at its next call (and a
// locked thread then sleeps until the goroutine is handed back to it), so a
// waker timing its spin with time.Now slept after 10 ms and let the wakee
// in whatever the scheduler did.
//
//go:noinline
func spin(n int) int {
	x := 0
	for i := range n {
		x += i ^ (x >> 3)
	}
	return x
}
