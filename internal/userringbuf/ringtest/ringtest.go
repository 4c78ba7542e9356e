// SPDX-License-Identifier: Apache-2.0

// Package ringtest checks package userringbuf against the running kernel:
// a small BPF program (bpf/echo.bpf.c) drains a user ring buffer that a
// userringbuf.Producer fills and copies every record into a kernel ring
// buffer that a userringbuf.Consumer reads. It needs CAP_BPF (root) and
// Linux >= 6.1 (BPF_MAP_TYPE_USER_RINGBUF), not sched_ext, so it runs on
// the host and in the VM lab alike.
package ringtest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"

	"github.com/swiftlane/swiftlane/internal/userringbuf"
)

// Echo is the loaded program with both rings mapped.
type Echo struct {
	objs    echoObjects
	In      *userringbuf.Producer
	Out     *userringbuf.Consumer
	inMap   *userringbuf.Mapping
	outMap  *userringbuf.Mapping
	InSize  int
	OutSize int
}

// Load loads the program with a user ring of inSize bytes and a kernel ring
// of outSize bytes (powers of two, multiples of the page size).
func Load(inSize, outSize int) (*Echo, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, err
	}
	spec, err := loadEcho()
	if err != nil {
		return nil, err
	}
	spec.Maps["in"].MaxEntries = uint32(inSize)
	spec.Maps["out"].MaxEntries = uint32(outSize)
	e := &Echo{InSize: inSize, OutSize: outSize}
	if err := spec.LoadAndAssign(&e.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("verifier: %+v", ve)
		}
		return nil, err
	}
	if e.In, e.inMap, err = userringbuf.MapProducer(e.objs.In.FD(), inSize); err != nil {
		e.Close()
		return nil, err
	}
	if e.Out, e.outMap, err = userringbuf.MapConsumer(e.objs.Out.FD(), outSize); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// Close releases the program and the mappings.
func (e *Echo) Close() error {
	var errs []error
	for _, m := range []*userringbuf.Mapping{e.inMap, e.outMap} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	errs = append(errs, e.objs.Close())
	return errors.Join(errs...)
}

// Record makes a test record of n bytes (n >= 2): its length, then a
// pattern derived from seq.
func Record(seq uint32, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(seq*31 + uint32(i)*7)
	}
	binary.LittleEndian.PutUint16(b, uint16(n))
	return b
}

// Drain runs the program once: the kernel drains the user ring. It returns
// how many records the kernel reported.
func (e *Echo) Drain() (int, error) {
	ret, err := e.objs.Drain.Run(&ebpf.RunOptions{})
	if err != nil {
		return 0, fmt.Errorf("run drain program: %w", err)
	}
	if int32(ret) < 0 {
		return 0, fmt.Errorf("bpf_user_ringbuf_drain returned %d", int32(ret))
	}
	return int(ret), nil
}

// Counters are the program's own counts.
type Counters struct {
	Echoed, Bad, OutFull uint64
}

// Counters reads them.
func (e *Echo) Counters() (Counters, error) {
	var c Counters
	err := errors.Join(e.objs.Echoed.Get(&c.Echoed), e.objs.Bad.Get(&c.Bad), e.objs.OutFull.Get(&c.OutFull))
	return c, err
}

// Check runs the checks: records of many sizes through 20+ laps of the ring
// (most wrap around its end), a full ring, a discarded record and a record
// still being written. Tests call it on the host (internal/userringbuf) and
// in the VM lab (test/vm). It skips only when this process may not load BPF.
func Check(t *testing.T) {
	const inSize = 4096
	e, err := Load(inSize, 4*inSize)
	if errors.Is(err, os.ErrPermission) || errors.Is(err, ebpf.ErrNotSupported) {
		t.Skipf("cannot load BPF here (%v): run as root on Linux >= 6.1", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	drainExpect := func(want int) {
		t.Helper()
		got, err := e.Drain()
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("kernel drained %d records, want %d", got, want)
		}
	}
	readBack := func(want [][]byte) {
		t.Helper()
		for i, w := range want {
			rec, err := e.Out.Peek()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(rec, w) {
				t.Fatalf("record %d came back as %x, want %x", i, rec, w)
			}
			e.Out.Advance()
		}
		if rec, _ := e.Out.Peek(); rec != nil {
			t.Fatalf("extra record came back: %x", rec)
		}
	}

	// Fill the ring to the brim each round, with one discarded record.
	seq := uint32(0)
	var written uint64
	for round := 0; written < 20*inSize; round++ {
		var want [][]byte
		skip, err := e.In.Reserve(40)
		if err != nil {
			t.Fatal(err)
		}
		for {
			n := 2 + int(seq*53)%200
			rec := Record(seq, n)
			if err := e.In.Write(rec); errors.Is(err, userringbuf.ErrFull) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			want = append(want, rec)
			written += uint64(n)
			seq++
		}
		e.In.Discard(skip)
		if e.In.Free() >= 8+256 {
			t.Fatalf("round %d: Reserve failed with %d bytes free", round, e.In.Free())
		}
		drainExpect(len(want))
		if e.In.Free() != inSize {
			t.Fatalf("round %d: %d bytes free after the kernel drained everything, want %d", round, e.In.Free(), inSize)
		}
		readBack(want)
	}

	// The kernel stops at a record that is still being written.
	busy, _ := e.In.Reserve(10)
	copy(busy, Record(1, 10))
	if err := e.In.Write(Record(2, 20)); err != nil {
		t.Fatal(err)
	}
	drainExpect(0)
	e.In.Submit(busy)
	drainExpect(2)
	readBack([][]byte{Record(1, 10), Record(2, 20)})

	c, err := e.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c.Bad != 0 || c.OutFull != 0 || c.Echoed != uint64(seq)+2 {
		t.Fatalf("program counters %+v, want %d echoed and nothing else", c, seq+2)
	}
}
