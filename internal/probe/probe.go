// SPDX-License-Identifier: Apache-2.0

// Package probe measures scheduling latency the way a network function feels
// it: a UDP echo between two processes, timed per round trip.
package probe

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"sort"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Echo answers every datagram on conn with the same bytes until ctx ends,
// except that bytes 8-11 of a datagram that long carry 1 + the CPU the
// answer was sent from (the client tells same-CPU round trips from
// cross-CPU ones with it). That getcpu is one system call inside the timed
// round trip, small beside the two wakeups each round trip measures.
func Echo(ctx context.Context, conn net.PacketConn) error {
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	buf := make([]byte, 2048)
	for {
		n, addr, err := conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if n >= 12 {
			binary.LittleEndian.PutUint32(buf[8:], uint32(CPU()+1))
		}
		if _, err := conn.WriteTo(buf[:n], addr); err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// Options of an RTT run.
type Options struct {
	Target   string        // echo server address, host:port
	Samples  int           // round trips to time
	Interval time.Duration // pause between round trips (a sleeping client, like a ping)
	Timeout  time.Duration // per round trip; a lost reply counts as a timeout
	Duration time.Duration // stop early after this long (0: no limit)
	WarmUp   time.Duration // how long to wait for the echo server to answer at all (default 10 s)
}

// Result summarises round-trip times in microseconds.
type Result struct {
	Samples  int     `json:"samples"`
	Timeouts int     `json:"timeouts"`
	AvgUs    float64 `json:"avg_us"`
	MinUs    float64 `json:"min_us"`
	P50Us    float64 `json:"p50_us"`
	P90Us    float64 `json:"p90_us"`
	P99Us    float64 `json:"p99_us"`
	MaxUs    float64 `json:"max_us"`
	// SameCPUPct is the share of round trips whose reply was sent from
	// the CPU the client read it on (of those the echo server reported
	// its CPU for).
	SameCPUPct float64   `json:"same_cpu_pct"`
	RTTUs      []float64 `json:"rtt_us,omitempty"`
	// Per round trip, with RTTUs: the client's and the echo server's
	// CPU (-1: not known).
	ClientCPU []int `json:"client_cpu,omitempty"`
	ServerCPU []int `json:"server_cpu,omitempty"`
}

// CPU is the CPU the calling thread runs on (-1 if unknown): a goroutine
// may move between threads, so it is as good as the moment it is read.
func CPU() int {
	var cpu uint32
	if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); e != 0 {
		return -1
	}
	return int(cpu)
}

// RTT sends Samples sequence-numbered datagrams, one at a time, and times each reply.
func RTT(ctx context.Context, o Options) (Result, error) {
	if o.Samples <= 0 {
		return Result{}, errors.New("samples must be positive")
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	conn, err := net.Dial("udp", o.Target)
	if err != nil {
		return Result{}, err
	}
	defer conn.Close()
	var res Result
	rtts := make([]float64, 0, o.Samples)
	var clientCPU, serverCPU []int
	out := make([]byte, 64)
	in := make([]byte, 2048)
	if o.WarmUp <= 0 {
		o.WarmUp = 10 * time.Second
	}
	if err := warmUp(ctx, conn, in, o.WarmUp); err != nil {
		return res, err
	}
	began := time.Now()
	for seq := uint64(1); len(rtts)+res.Timeouts < o.Samples; seq++ {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		if o.Duration > 0 && time.Since(began) > o.Duration {
			break
		}
		binary.LittleEndian.PutUint64(out, seq)
		start := time.Now()
		if _, err := conn.Write(out); err != nil {
			return res, err
		}
		if err := conn.SetReadDeadline(start.Add(o.Timeout)); err != nil {
			return res, err
		}
		for {
			n, err := conn.Read(in)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					res.Timeouts++
					break
				}
				return res, err
			}
			if n >= 8 && binary.LittleEndian.Uint64(in) == seq {
				rtts = append(rtts, float64(time.Since(start).Nanoseconds())/1e3)
				clientCPU = append(clientCPU, CPU())
				server := -1
				if n >= 12 {
					server = int(binary.LittleEndian.Uint32(in[8:])) - 1
				}
				serverCPU = append(serverCPU, server)
				break
			}
			// A late reply to an earlier (timed-out) probe: keep waiting for ours.
		}
		if o.Interval > 0 {
			time.Sleep(o.Interval)
		}
	}
	res = Summarise(rtts, res.Timeouts)
	res.ClientCPU, res.ServerCPU = clientCPU, serverCPU
	res.SameCPUPct = sameCPUPct(clientCPU, serverCPU)
	return res, nil
}

// sameCPUPct is the share of pairs with both CPUs known and equal.
func sameCPUPct(client, server []int) float64 {
	known, same := 0, 0
	for i := range client {
		if client[i] < 0 || server[i] < 0 {
			continue
		}
		known++
		if client[i] == server[i] {
			same++
		}
	}
	if known == 0 {
		return 0
	}
	return round(100 * float64(same) / float64(known))
}

// warmUp waits until the echo server answers: it may still be starting
// (connection refused) or cold. Sequence number 0 is never timed.
func warmUp(ctx context.Context, conn net.Conn, in []byte, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	ping := make([]byte, 8)
	for ctx.Err() == nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer from %s within %v: is `swiftlane probe echo` running there?", conn.RemoteAddr(), limit)
		}
		conn.Write(ping)
		conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if n, err := conn.Read(in); err == nil && n >= 8 && binary.LittleEndian.Uint64(in) == 0 {
			return nil
		}
		// Refused (not listening yet) fails at once: pace the retries.
		time.Sleep(10 * time.Millisecond)
	}
	return ctx.Err()
}

// Summarise computes the distribution of samples (µs).
func Summarise(rtts []float64, timeouts int) Result {
	r := Result{Samples: len(rtts), Timeouts: timeouts, RTTUs: rtts}
	if len(rtts) == 0 {
		return r
	}
	s := append([]float64(nil), rtts...)
	sort.Float64s(s)
	var sum float64
	for _, v := range s {
		sum += v
	}
	r.AvgUs = round(sum / float64(len(s)))
	r.MinUs = round(s[0])
	r.P50Us = round(Quantile(s, 0.50))
	r.P90Us = round(Quantile(s, 0.90))
	r.P99Us = round(Quantile(s, 0.99))
	r.MaxUs = round(s[len(s)-1])
	return r
}

// Quantile of sorted samples, nearest-rank.
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}

func round(v float64) float64 { return math.Round(v*10) / 10 }

func (r Result) String() string {
	return fmt.Sprintf("samples=%d timeouts=%d avg=%.1fµs p50=%.1fµs p90=%.1fµs p99=%.1fµs max=%.1fµs",
		r.Samples, r.Timeouts, r.AvgUs, r.P50Us, r.P90Us, r.P99Us, r.MaxUs)
}
