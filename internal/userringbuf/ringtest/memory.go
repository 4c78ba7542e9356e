// SPDX-License-Identifier: Apache-2.0

package ringtest

import (
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/swiftlane/swiftlane/internal/userringbuf"
)

// Memory lays out memory the way the kernel does for a ring buffer map, for
// tests without a kernel: a consumer page, a producer page and a data area
// of size bytes mapped twice in a row (the same memfd pages at two
// addresses), so records really wrap around. data has 2*size bytes.
func Memory(t testing.TB, size int) (cons, prod, data []byte) {
	t.Helper()
	page := os.Getpagesize()
	fd, err := unix.MemfdCreate("ringtest", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(2*page+size)); err != nil {
		t.Fatal(err)
	}
	m := func(off, n int) []byte {
		b, err := unix.Mmap(fd, int64(off), n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Munmap(b) })
		return b
	}
	cons, prod = m(0, page), m(page, page)
	// Reserve 2*size of address space, then map the data pages over both halves.
	area, err := unix.Mmap(-1, 0, 2*size, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(area) })
	base := uintptr(unsafe.Pointer(&area[0]))
	for half := 0; half < 2; half++ {
		_, _, errno := unix.Syscall6(unix.SYS_MMAP, base+uintptr(half*size), uintptr(size),
			unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED, uintptr(fd), uintptr(2*page))
		if errno != 0 {
			t.Fatal(errno)
		}
	}
	return cons, prod, area
}

// Pair returns a producer and a consumer sharing one ring of size bytes in
// Memory, and the ring's data area.
func Pair(t testing.TB, size int) (*userringbuf.Producer, *userringbuf.Consumer, []byte) {
	t.Helper()
	cons, prod, data := Memory(t, size)
	p, err := userringbuf.NewProducer(cons, prod, data)
	if err != nil {
		t.Fatal(err)
	}
	c, err := userringbuf.NewConsumer(cons, prod, data)
	if err != nil {
		t.Fatal(err)
	}
	return p, c, data
}
