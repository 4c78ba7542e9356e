// SPDX-License-Identifier: Apache-2.0

package schedext

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// A scheduler whose load failed halfway closes its Links as they are: the
// zero value, or partly opened, must release without error.
func TestLinksCloseWhatIsThere(t *testing.T) {
	var l Links
	if err := l.Detach(); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if err := l.CloseEvents(); err != nil {
		t.Fatalf("CloseEvents: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// ringWriter loads a socket filter that writes one struct swl_event
// (EventExec, pid 7) to ring without waking its reader, as emit_event does,
// each time it runs.
func ringWriter(t *testing.T, ring *ebpf.Map) *ebpf.Program {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:    ebpf.SocketFilter,
		License: "GPL",
		Instructions: asm.Instructions{
			// struct swl_event at fp-16: type, pid, tgid, ppid.
			asm.StoreImm(asm.R10, -16, int64(EventExec), asm.Word),
			asm.StoreImm(asm.R10, -12, 7, asm.Word),
			asm.StoreImm(asm.R10, -8, 7, asm.Word),
			asm.StoreImm(asm.R10, -4, 1, asm.Word),
			asm.LoadMapPtr(asm.R1, ring.FD()),
			asm.Mov.Reg(asm.R2, asm.R10),
			asm.Add.Imm(asm.R2, -16),
			asm.Mov.Imm(asm.R3, 16),
			asm.Mov.Imm(asm.R4, 1), // BPF_RB_NO_WAKEUP
			asm.FnRingbufOutput.Call(),
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		},
	})
	if err != nil {
		t.Fatalf("load ring writer: %v", err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog
}

// ReadEvent finds records submitted without a wakeup, and CloseEvents ends
// a ReadEvent that is waiting between looks at once, not at its next look.
func TestReadEventNoWakeupAndClose(t *testing.T) {
	ring, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.RingBuf, MaxEntries: 4096})
	if errors.Is(err, unix.EPERM) {
		t.Skip("creating a BPF ring needs CAP_BPF")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer ring.Close()
	write := ringWriter(t, ring)
	var l Links
	if err := l.OpenEvents(ring); err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	// Quiet first, so the reader has backed off to its longest wait.
	got := make(chan error, 1)
	go func() {
		ev, err := l.ReadEvent()
		if err == nil && (ev.Type != EventExec || ev.TGID != 7 || ev.PPID != 1) {
			err = fmt.Errorf("read %+v, want exec of 7 by 1", ev)
		}
		got <- err
	}()
	time.Sleep(3 * eventPollMax) // let it back off: what is tested is the wait that follows
	if _, err := write.Run(&ebpf.RunOptions{Data: make([]byte, 14)}); err != nil {
		t.Fatalf("run ring writer: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}

	// With waits that only CloseEvents can cut short, ReadEvent returns
	// because of it or not at all.
	defer func(lo, hi time.Duration) { eventPollMin, eventPollMax = lo, hi }(eventPollMin, eventPollMax)
	eventPollMin, eventPollMax = time.Hour, time.Hour
	go func() { _, err := l.ReadEvent(); got <- err }()
	time.Sleep(100 * time.Millisecond) // it is waiting between looks now, or about to
	if err := l.CloseEvents(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, os.ErrClosed) {
			t.Fatalf("ReadEvent after CloseEvents: %v, want os.ErrClosed", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("ReadEvent still waiting a minute after CloseEvents")
	}
}
