// SPDX-License-Identifier: Apache-2.0

package probe

import (
	"context"
	"encoding/binary"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestSummarise(t *testing.T) {
	var s []float64
	for i := 1; i <= 100; i++ {
		s = append(s, float64(i))
	}
	r := Summarise(s, 2)
	if r.Samples != 100 || r.Timeouts != 2 || r.AvgUs != 50.5 || r.P50Us != 50 || r.P90Us != 90 || r.P99Us != 99 || r.MaxUs != 100 || r.MinUs != 1 {
		t.Fatalf("%+v", r)
	}
}

func TestRTTOverLoopback(t *testing.T) {
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Echo(ctx, conn) }()
	r, err := RTT(context.Background(), Options{Target: conn.LocalAddr().String(), Samples: 50, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if r.Samples != 50 || r.Timeouts != 0 || r.MinUs <= 0 || r.MaxUs < r.P99Us || r.P99Us < r.P50Us {
		t.Fatalf("implausible result %+v", r)
	}
	// Every reply says where it was sent from: a real CPU of this machine.
	if len(r.ClientCPU) != 50 || len(r.ServerCPU) != 50 {
		t.Fatalf("CPUs for %d/%d of 50 round trips", len(r.ClientCPU), len(r.ServerCPU))
	}
	for i := range r.ServerCPU {
		if c := r.ServerCPU[i]; c < 0 || c >= runtime.NumCPU() || r.ClientCPU[i] < 0 {
			t.Fatalf("round trip %d: client CPU %d, server CPU %d", i, r.ClientCPU[i], c)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("echo: %v", err)
	}
}

func TestSameCPUPct(t *testing.T) {
	if got := sameCPUPct([]int{0, 1, 1, 0, -1}, []int{0, 0, 1, -1, 1}); got != 66.7 {
		t.Fatalf("same-CPU share %v, want 66.7 (2 of the 3 pairs known)", got)
	}
	if got := sameCPUPct(nil, nil); got != 0 {
		t.Fatalf("no pairs: %v", got)
	}
}

func TestRTTFailsClearlyWithoutServer(t *testing.T) {
	// A socket that never answers.
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = RTT(context.Background(), Options{Target: conn.LocalAddr().String(), Samples: 2, WarmUp: 200 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "probe echo") {
		t.Fatalf("err = %v", err)
	}
}

func TestRTTCountsLostReplies(t *testing.T) {
	// An echo that answers the warm-up and every even sequence number only.
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go func() {
		buf := make([]byte, 64)
		for {
			n, addr, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			if n >= 8 && binary.LittleEndian.Uint64(buf)%2 == 0 {
				conn.WriteTo(buf[:n], addr)
			}
		}
	}()
	r, err := RTT(context.Background(), Options{Target: conn.LocalAddr().String(), Samples: 6, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Timeouts != 3 || r.Samples != 3 {
		t.Fatalf("%+v", r)
	}
}
