// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"
)

const response = "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok" // a tiny HTTP-like answer

// serveShort answers each connection's request and closes it, like an
// HTTP server given "Connection: close": one request per connection. It
// reads the whole header first, so the close never finds unread data (which
// would turn the FIN into a RST and show up as a reset in the counters).
func serveShort(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			r := bufio.NewReader(c)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					return
				}
				if line == "\r\n" || line == "\n" {
					break
				}
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
	if _, err := io.WriteString(c, "GET / HTTP/1.0\r\n\r\n"); err != nil {
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
