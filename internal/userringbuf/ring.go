// SPDX-License-Identifier: Apache-2.0

// Package userringbuf reads and writes BPF ring buffers through their shared
// memory, without system calls and without allocating:
//
//   - Producer writes records into a BPF_MAP_TYPE_USER_RINGBUF, which a BPF
//     program drains with bpf_user_ringbuf_drain(). cilium/ebpf has no
//     producer for this map type.
//   - Consumer reads records from a BPF_MAP_TYPE_RINGBUF that BPF programs
//     fill with bpf_ringbuf_reserve()/submit().
//
// Both map types share one layout (kernel/bpf/ringbuf.c): a page holding the
// consumer position, a page holding the producer position, then the data
// area mapped twice in a row, so a record that wraps past the end of the area
// is still contiguous in memory. Positions are byte counters that only grow;
// a position's offset in the data area is pos & (size-1). Each record starts
// with an 8-byte header: a 32-bit length whose top two bits are BUSY (still
// being written) and DISCARD (skip it), and 32 bits the kernel uses for its
// own producer only. Records are padded to 8 bytes.
//
// Memory ordering: the side that writes a record publishes it with a release
// store (of the producer position, or of the header that clears BUSY) after
// writing its bytes; the reader loads it with an acquire load before reading
// them. Go's sync/atomic operations are sequentially consistent, which is at
// least that strong. Each ring has exactly one producer and one consumer here.
package userringbuf

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"
)

const (
	// HeaderSize is the size of a record header.
	HeaderSize = 8
	busyBit    = 1 << 31
	discardBit = 1 << 30
	lenMask    = discardBit - 1
)

var (
	// ErrFull means the record does not fit until the consumer catches up.
	ErrFull = errors.New("ring buffer full")
	// ErrTooBig means the record can never fit in this ring.
	ErrTooBig = errors.New("record larger than the ring buffer")
	// ErrCorrupt means a header points past the producer position.
	ErrCorrupt = errors.New("ring buffer record header is inconsistent with the producer position")
)

// ring is one ring's view of the shared memory.
type ring struct {
	consumer *uint64 // consumer position (the consumer's page)
	producer *uint64 // producer position (the producer's page)
	data     []byte  // the data area, mapped twice: len(data) == 2*size
	mask     uint64  // size-1; size is a power of two
}

func newRing(consumerPage, producerPage, data []byte) (ring, error) {
	size := uint64(len(data) / 2)
	if size == 0 || size&(size-1) != 0 || uint64(len(data)) != 2*size {
		return ring{}, fmt.Errorf("data area of %d bytes: want twice a power of two", len(data))
	}
	if len(consumerPage) < 8 || len(producerPage) < 8 {
		return ring{}, errors.New("position pages too small")
	}
	return ring{
		consumer: (*uint64)(unsafe.Pointer(&consumerPage[0])),
		producer: (*uint64)(unsafe.Pointer(&producerPage[0])),
		data:     data,
		mask:     size - 1,
	}, nil
}

// Size is the data area's size in bytes.
func (r *ring) Size() int { return int(r.mask + 1) }

func (r *ring) header(pos uint64) *uint32 {
	return (*uint32)(unsafe.Pointer(&r.data[pos&r.mask]))
}

// recordSize is a record's footprint: header plus data, padded to 8 bytes.
func recordSize(n uint32) uint64 { return (uint64(n) + HeaderSize + 7) &^ 7 }

// Producer writes records for a BPF program to drain. Not safe for
// concurrent use.
type Producer struct {
	ring
	pos uint64 // our producer position; only we write it
}

// NewProducer returns a producer over the ring's memory: the consumer's page
// (read only), the producer's page and the twice-mapped data area.
func NewProducer(consumerPage, producerPage, data []byte) (*Producer, error) {
	r, err := newRing(consumerPage, producerPage, data)
	if err != nil {
		return nil, err
	}
	return &Producer{ring: r, pos: atomic.LoadUint64(r.producer)}, nil
}

// Free is how many bytes of records fit now (header and padding included).
func (p *Producer) Free() int {
	return int(p.mask + 1 - (p.pos - atomic.LoadUint64(p.consumer)))
}

// Reserve returns n bytes of the ring to write a record into; Submit or
// Discard must follow, in the order of the reservations. The consumer stops
// at a reserved record until then.
func (p *Producer) Reserve(n int) ([]byte, error) {
	if n < 0 || n > lenMask || recordSize(uint32(n)) > p.mask+1 {
		return nil, ErrTooBig
	}
	total := recordSize(uint32(n))
	// Acquire: the consumer is done with the bytes up to its position.
	if p.pos-atomic.LoadUint64(p.consumer)+total > p.mask+1 {
		return nil, ErrFull
	}
	hdr := p.header(p.pos)
	atomic.StoreUint32(hdr, uint32(n)|busyBit)
	*(*uint32)(unsafe.Add(unsafe.Pointer(hdr), 4)) = 0
	// Unmasked: a record whose header ends the area starts at the second
	// mapping, so its header is always the 8 bytes before it (see commit).
	off := p.pos&p.mask + HeaderSize
	p.pos += total
	// Release: the BUSY header is visible before the new position.
	atomic.StoreUint64(p.producer, p.pos)
	// Not a full slice expression: a zero-capacity slice would not point
	// at its record, and commit finds the header from that pointer.
	return p.data[off : off+uint64(n)], nil
}

// Submit publishes a reserved record: the release store of its header
// orders every write into rec before it.
func (p *Producer) Submit(rec []byte) { p.commit(rec, 0) }

// Discard withdraws a reserved record; the consumer skips it.
func (p *Producer) Discard(rec []byte) { p.commit(rec, discardBit) }

func (p *Producer) commit(rec []byte, flag uint32) {
	hdr := (*uint32)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(rec)), -HeaderSize))
	atomic.StoreUint32(hdr, uint32(len(rec))|flag)
}

// Write reserves, copies and submits one record.
func (p *Producer) Write(rec []byte) error {
	buf, err := p.Reserve(len(rec))
	if err != nil {
		return err
	}
	copy(buf, rec)
	p.Submit(buf)
	return nil
}

// Consumer reads records a BPF program (or a Producer) wrote. Not safe for
// concurrent use.
type Consumer struct {
	ring
	next uint64 // consumer position after the record Peek returned
}

// NewConsumer returns a consumer over the ring's memory: the consumer's page
// (writable), the producer's page and the twice-mapped data area.
func NewConsumer(consumerPage, producerPage, data []byte) (*Consumer, error) {
	r, err := newRing(consumerPage, producerPage, data)
	if err != nil {
		return nil, err
	}
	return &Consumer{ring: r}, nil
}

// Available is how many bytes of records are waiting (including ones still
// being written).
func (c *Consumer) Available() int {
	return int(atomic.LoadUint64(c.producer) - atomic.LoadUint64(c.consumer))
}

// Peek returns the next committed record, or nil when there is none (the
// ring is empty or the next record is still being written). The record
// stays in the ring, and valid, until Advance. Discarded records are
// skipped.
func (c *Consumer) Peek() ([]byte, error) {
	cons := atomic.LoadUint64(c.consumer)
	for {
		// Acquire: pairs with the producer's release of its position.
		prod := atomic.LoadUint64(c.producer)
		if cons == prod {
			return nil, nil
		}
		// Acquire: pairs with the release store that cleared BUSY.
		hdr := atomic.LoadUint32(c.header(cons))
		if hdr&busyBit != 0 {
			return nil, nil
		}
		n := hdr & lenMask
		total := recordSize(n)
		if total > prod-cons {
			return nil, fmt.Errorf("%w: record of %d bytes at %d, producer at %d", ErrCorrupt, n, cons, prod)
		}
		if hdr&discardBit != 0 {
			cons += total
			atomic.StoreUint64(c.consumer, cons)
			continue
		}
		off := cons&c.mask + HeaderSize
		c.next = cons + total
		return c.data[off : off+uint64(n)], nil
	}
}

// Advance consumes the record the last Peek returned: a release store of
// the consumer position, after which the producer may overwrite it.
func (c *Consumer) Advance() {
	atomic.StoreUint64(c.consumer, c.next)
}
