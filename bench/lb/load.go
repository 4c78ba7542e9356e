// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swiftlane/swiftlane/internal/lb/labnet"
)

const response = "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok" // a tiny HTTP-like answer

// serveShort answers each connection's request line and closes it, like an
// HTTP/1.0 server: one request per connection.
func serveShort(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
				return
			}
			io.WriteString(c, response)
		}()
	}
}

// serveSink reads a stream to EOF and answers with the byte count.
func serveSink(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			n, _ := io.Copy(io.Discard, c)
			binary.Write(c, binary.BigEndian, n)
		}()
	}
}

// request makes one short connection: connect, send a line, read to EOF.
func request(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.0\r\n"); err != nil {
		return err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return err
	}
	if string(b) != response {
		return fmt.Errorf("short answer %q", b)
	}
	return nil
}

// closedLoop runs workers making back-to-back connections for d and
// returns completed requests and errors. Each worker is an OS thread inside
// ns so its sockets are created there.
func closedLoop(ns labnet.NS, addr string, workers int, d time.Duration) (done, failed int64) {
	var ok, bad atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ns.Do(func() error {
				for time.Now().Before(end) {
					if err := request(addr); err != nil {
						bad.Add(1)
					} else {
						ok.Add(1)
					}
				}
				return nil
			})
		}()
	}
	wg.Wait()
	return ok.Load(), bad.Load()
}

// openLoop sends requests on a fixed schedule (rate per second for d) and
// measures each from its scheduled start, so a slow response delays the
// measurement of those queued behind it instead of hiding them
// (no coordinated omission). It returns sorted latencies and errors.
func openLoop(ns labnet.NS, addr string, rate int, d time.Duration, workers int) ([]time.Duration, int) {
	total := int(float64(rate) * d.Seconds())
	start := time.Now().Add(50 * time.Millisecond)
	next := atomic.Int64{}
	lat := make([]time.Duration, total)
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ns.Do(func() error {
				for {
					i := int(next.Add(1) - 1)
					if i >= total {
						return nil
					}
					at := start.Add(time.Duration(i) * time.Second / time.Duration(rate))
					time.Sleep(time.Until(at))
					if err := request(addr); err != nil {
						failed.Add(1)
						lat[i] = -1
						continue
					}
					lat[i] = time.Since(at)
				}
			})
		}()
	}
	wg.Wait()
	ok := slices.DeleteFunc(lat, func(l time.Duration) bool { return l < 0 })
	slices.Sort(ok)
	return ok, int(failed.Load())
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

// stream sends for d over one connection and returns what the sink received.
func stream(ns labnet.NS, addr string, d time.Duration) (int64, error) {
	var n int64
	err := ns.Do(func() error {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		buf := make([]byte, 256<<10)
		end := time.Now().Add(d)
		c.SetDeadline(end.Add(5 * time.Second))
		for time.Now().Before(end) {
			if _, err := c.Write(buf); err != nil {
				return err
			}
		}
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			return err
		}
		return binary.Read(c, binary.BigEndian, &n)
	})
	if err == nil && n == 0 {
		err = errors.New("sink received nothing")
	}
	return n, err
}
