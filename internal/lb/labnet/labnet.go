// SPDX-License-Identifier: Apache-2.0

package labnet

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// NS is a named network namespace (/run/netns/<Name>).
type NS struct{ Name string }

// Run executes argv inside the namespace and returns its combined output.
func (n NS) Run(argv ...string) (string, error) { return n.RunInput("", argv...) }

// RunInput is Run with stdin as the command's input (none when empty): a
// batch for iptables-restore, nft -f - or ip -batch -.
func (n NS) RunInput(stdin string, argv ...string) (string, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.Name}, argv...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("netns %s: %s: %w: %s", n.Name, strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Do runs f on an OS thread switched into the namespace. Sockets f creates
// stay in the namespace after f returns; goroutines f starts do not.
func (n NS) Do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		// The thread is never returned to the pool: if switching back failed
		// it would carry the wrong namespace into unrelated goroutines.
		runtime.LockOSThread()
		fd, err := unix.Open("/run/netns/"+n.Name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("open netns %s: %w", n.Name, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", n.Name, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// Dial connects from inside the namespace.
func (n NS) Dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func() (err error) {
		c, err = net.DialTimeout(network, addr, timeout)
		return err
	})
	return c, err
}

// Listen opens a TCP listener inside the namespace.
func (n NS) Listen(addr string) (net.Listener, error) {
	var l net.Listener
	err := n.Do(func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	})
	return l, err
}

// ListenPacket opens a UDP socket inside the namespace.
func (n NS) ListenPacket(addr string) (net.PacketConn, error) {
	var l net.PacketConn
	err := n.Do(func() (err error) {
		l, err = net.ListenPacket("udp", addr)
		return err
	})
	return l, err
}

// ConntrackCount is the number of nf_conntrack entries in the namespace.
func (n NS) ConntrackCount() (int, error) {
	out, err := n.Run("conntrack", "-C")
	if err != nil {
		return 0, err
	}
	var c int
	_, err = fmt.Sscan(strings.TrimSpace(out), &c)
	return c, err
}

// Topology is a node namespace with pods and an external host around it:
//
//	client pod  10.244.1.2 --- vc  (10.244.1.1)  \
//	backend i   10.244.(2+i).2 --- vb<i> (.1)     node (forwarding, the LB)
//	external    198.18.0.2 --- ext0 (198.18.0.1) /
//
// and the same in IPv6 (dual-stack): fd00:244:<n>::2 for the pod whose IPv4
// subnet is 10.244.<n>.0/24, fd00:18::2 / fd00:18::1 for the external host.
// Each pod's default routes point at its veth peer in the node, as with
// the usual CNI plugins.
type Topology struct {
	Node, Client, External NS
	Backends               []NS
	NodeIP, ExternalIP     netip.Addr
	ClientIP               netip.Addr
	BackendIPs             []netip.Addr
	// The IPv6 side.
	NodeIP6, ExternalIP6 netip.Addr
	ClientIP6            netip.Addr
	BackendIPs6          []netip.Addr
	all                  []NS
}

var seq atomic.Int32

// New builds a topology with n backends. Names carry the process id so
// parallel runs do not collide. On error everything made so far is removed.
func New(n int) (t *Topology, err error) {
	prefix := fmt.Sprintf("sl%d-%d", os.Getpid(), seq.Add(1))
	t = &Topology{
		Node: NS{prefix + "-node"}, Client: NS{prefix + "-cli"}, External: NS{prefix + "-ext"},
		NodeIP: netip.MustParseAddr("198.18.0.1"), ExternalIP: netip.MustParseAddr("198.18.0.2"),
		ClientIP: netip.MustParseAddr("10.244.1.2"),
		NodeIP6:  netip.MustParseAddr("fd00:18::1"), ExternalIP6: netip.MustParseAddr("fd00:18::2"),
		ClientIP6: netip.MustParseAddr("fd00:244:1::2"),
	}
	t.all = []NS{t.Node, t.Client, t.External}
	for i := range n {
		t.Backends = append(t.Backends, NS{fmt.Sprintf("%s-b%d", prefix, i)})
		t.BackendIPs = append(t.BackendIPs, netip.AddrFrom4([4]byte{10, 244, byte(2 + i), 2}))
		t.BackendIPs6 = append(t.BackendIPs6, netip.MustParseAddr(fmt.Sprintf("fd00:244:%d::2", 2+i)))
	}
	t.all = append(t.all, t.Backends...)
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	for _, ns := range t.all {
		if out, err := exec.Command("ip", "netns", "add", ns.Name).CombinedOutput(); err != nil {
			return t, fmt.Errorf("ip netns add %s: %w: %s", ns.Name, err, out)
		}
		if _, err := ns.Run("ip", "link", "set", "lo", "up"); err != nil {
			return t, err
		}
		// Addresses usable at once: no duplicate address detection.
		if _, err := ns.Run("sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0"); err != nil {
			return t, err
		}
	}
	if _, err := t.Node.Run("sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"); err != nil {
		return t, err
	}
	if err := t.pod(t.Client, "vc", "10.244.1.1/24", "10.244.1.2/24", "10.244.1.1", "fd00:244:1::1"); err != nil {
		return t, err
	}
	for i, b := range t.Backends {
		gw := fmt.Sprintf("10.244.%d.1", 2+i)
		if err := t.pod(b, fmt.Sprintf("vb%d", i), gw+"/24", fmt.Sprintf("10.244.%d.2/24", 2+i), gw, fmt.Sprintf("fd00:244:%d::1", 2+i)); err != nil {
			return t, err
		}
	}
	if err := t.pod(t.External, "ext0", "198.18.0.1/24", "198.18.0.2/24", "198.18.0.1", "fd00:18::1"); err != nil {
		return t, err
	}
	return t, nil
}

// pod links ns to the node with a veth pair created inside the node
// namespace, so nothing ever appears in the caller's namespace.
func (t *Topology) pod(ns NS, nodeIf, nodeAddr, podAddr, gw, gw6 string) error {
	// The pod's IPv6 address is the gateway's with ::2 for ::1.
	pod6 := strings.TrimSuffix(gw6, "1") + "2"
	steps := []struct {
		in   NS
		argv []string
	}{
		{t.Node, []string{"ip", "link", "add", nodeIf, "type", "veth", "peer", "name", "eth0", "netns", ns.Name}},
		{t.Node, []string{"ip", "addr", "add", nodeAddr, "dev", nodeIf}},
		{t.Node, []string{"ip", "link", "set", nodeIf, "up"}},
		{ns, []string{"ip", "addr", "add", podAddr, "dev", "eth0"}},
		{ns, []string{"ip", "link", "set", "eth0", "up"}},
		{ns, []string{"ip", "route", "add", "default", "via", gw}},
		{t.Node, []string{"ip", "-6", "addr", "add", gw6 + "/64", "dev", nodeIf, "nodad"}},
		{ns, []string{"ip", "-6", "addr", "add", pod6 + "/64", "dev", "eth0", "nodad"}},
		{ns, []string{"ip", "-6", "route", "add", "default", "via", gw6}},
	}
	for _, s := range steps {
		if _, err := s.in.Run(s.argv...); err != nil {
			return err
		}
	}
	return nil
}

// TrackConnections makes the node namespace run nf_conntrack, as any node
// with a stateful firewall or kube-proxy rules does; without a user,
// conntrack is not even active in a fresh namespace and "zero entries"
// would prove nothing.
func (t *Topology) TrackConnections() error {
	const rules = `table inet swiftlane_test {
	chain track_pre { type filter hook prerouting priority 0; ct state new counter; }
	chain track_forward { type filter hook forward priority 0; ct state new counter; }
}`
	_, err := t.Node.RunInput(rules, "nft", "-f", "-")
	return err
}

// Close deletes every namespace (and with them the veths and routes).
func (t *Topology) Close() error {
	var first error
	for _, ns := range t.all {
		if _, err := os.Stat("/run/netns/" + ns.Name); err != nil {
			continue
		}
		if out, err := exec.Command("ip", "netns", "del", ns.Name).CombinedOutput(); err != nil && first == nil {
			first = fmt.Errorf("ip netns del %s: %w: %s", ns.Name, err, out)
		}
	}
	return first
}
