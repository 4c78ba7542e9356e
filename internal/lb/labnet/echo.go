// SPDX-License-Identifier: Apache-2.0

package labnet

import (
	"errors"
	"fmt"
	"net"
	"strings"
)

// Echo is a backend that answers every TCP connection and UDP datagram with
// "<name> <peer address>", so clients can tell which backend served them
// and which source address that backend saw.
type Echo struct {
	tcp net.Listener
	udp net.PacketConn
}

// StartEcho serves on port in ns until Close.
func StartEcho(ns NS, name string, port int) (*Echo, error) {
	addr := fmt.Sprintf(":%d", port)
	l, err := ns.Listen(addr)
	if err != nil {
		return nil, err
	}
	u, err := ns.ListenPacket(addr)
	if err != nil {
		l.Close()
		return nil, err
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%s %s\n", name, c.RemoteAddr())
			c.Close()
		}
	}()
	go func() {
		buf := make([]byte, 2048)
		for {
			_, from, err := u.ReadFrom(buf)
			if err != nil {
				return
			}
			u.WriteTo([]byte(fmt.Sprintf("%s %s\n", name, from)), from)
		}
	}()
	return &Echo{tcp: l, udp: u}, nil
}

func (e *Echo) Close() error { return errors.Join(e.tcp.Close(), e.udp.Close()) }

// ParseEcho splits an Echo answer into backend name and the peer it saw.
func ParseEcho(s string) (name, peer string, err error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return "", "", fmt.Errorf("unexpected echo answer %q", s)
	}
	return f[0], f[1], nil
}
