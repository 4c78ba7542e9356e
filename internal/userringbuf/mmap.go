// SPDX-License-Identifier: Apache-2.0

package userringbuf

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Mapping is a ring buffer map's memory mapped into this process. The
// kernel pins those pages (they are vmalloc'ed for the map), so reading and
// writing them never page-faults.
type Mapping struct {
	pos  []byte // the consumer's page
	rest []byte // the producer's page and the data area twice
}

// Close unmaps the memory; the Producer or Consumer over it must not be used
// afterwards.
func (m *Mapping) Close() error {
	var errs []error
	for _, b := range [][]byte{m.pos, m.rest} {
		if b != nil {
			errs = append(errs, unix.Munmap(b))
		}
	}
	m.pos, m.rest = nil, nil
	return errors.Join(errs...)
}

func mapRing(fd, size int, consumerProt, restProt int) (*Mapping, []byte, []byte, []byte, error) {
	page := os.Getpagesize()
	if size <= 0 || size&(size-1) != 0 || size%page != 0 {
		return nil, nil, nil, nil, fmt.Errorf("ring size %d: want a power of two, multiple of the page size", size)
	}
	cons, err := unix.Mmap(fd, 0, page, consumerProt, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("mmap consumer position: %w", err)
	}
	rest, err := unix.Mmap(fd, int64(page), page+2*size, restProt, unix.MAP_SHARED)
	if err != nil {
		unix.Munmap(cons)
		return nil, nil, nil, nil, fmt.Errorf("mmap producer position and data: %w", err)
	}
	return &Mapping{pos: cons, rest: rest}, cons, rest[:page], rest[page:], nil
}

// MapProducer maps a BPF_MAP_TYPE_USER_RINGBUF map (fd, max_entries size):
// the kernel lets user space write the producer page and the data, and only
// read the consumer page.
func MapProducer(fd, size int) (*Producer, *Mapping, error) {
	m, cons, prod, data, err := mapRing(fd, size, unix.PROT_READ, unix.PROT_READ|unix.PROT_WRITE)
	if err != nil {
		return nil, nil, err
	}
	p, err := NewProducer(cons, prod, data)
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	return p, m, nil
}

// MapConsumer maps a BPF_MAP_TYPE_RINGBUF map (fd, max_entries size): user
// space may write only the consumer page.
func MapConsumer(fd, size int) (*Consumer, *Mapping, error) {
	m, cons, prod, data, err := mapRing(fd, size, unix.PROT_READ|unix.PROT_WRITE, unix.PROT_READ)
	if err != nil {
		return nil, nil, err
	}
	c, err := NewConsumer(cons, prod, data)
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	return c, m, nil
}
