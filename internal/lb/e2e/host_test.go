// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	lbbpf "github.com/swiftlane/swiftlane/internal/lb/bpf"
	"github.com/swiftlane/swiftlane/internal/lb/labnet"
)

// The node's own connections are balanced at the socket by cgroup programs
// (internal/lb/bpf/sock.bpf.c). The socket programs apply to the processes
// of the cgroup they are attached to, so the tests attach them to a cgroup
// of their own and run the client as a separate process inside it (this
// test binary again, see TestMain): the machine's other processes are never
// translated.

// hostClientEnv makes the test binary a client: "<mode> <address> <count>",
// mode tcp, udp (connected) or udp-unconnected (sendto/recvfrom). It prints
// one line per request: the backend's name, the peer the backend saw, and
// the address the client saw the answer come from (getpeername, or
// recvfrom's source).
const hostClientEnv = "SWIFTLANE_E2E_HOST_CLIENT"

func TestMain(m *testing.M) {
	if spec := os.Getenv(hostClientEnv); spec != "" {
		os.Exit(hostClient(spec))
	}
	os.Exit(m.Run())
}

func hostClient(spec string) int {
	var mode, addr string
	var n int
	if _, err := fmt.Sscan(spec, &mode, &addr, &n); err != nil {
		fmt.Printf("error: %s=%q: %v\n", hostClientEnv, spec, err)
		return 2
	}
	for range n {
		name, peer, from, err := hostAsk(mode, addr)
		if err != nil {
			fmt.Printf("error: %v\n", err)
			return 1
		}
		fmt.Println(name, peer, from)
	}
	return 0
}

func hostAsk(mode, addr string) (name, peer, from string, err error) {
	var line string
	switch mode {
	case "tcp", "udp":
		c, err := net.DialTimeout(mode, addr, timeout)
		if err != nil {
			return "", "", "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(timeout))
		if mode == "udp" {
			if _, err := c.Write([]byte("hi")); err != nil {
				return "", "", "", err
			}
		}
		if line, err = bufio.NewReader(c).ReadString('\n'); err != nil {
			return "", "", "", fmt.Errorf("%s %s: %w", mode, addr, err)
		}
		from = c.RemoteAddr().String() // Go reads it with getpeername
	case "udp-unconnected":
		to, err := net.ResolveUDPAddr("udp", addr)
		if err != nil {
			return "", "", "", err
		}
		// An IPv6 socket (both families), as "udp" with no address gives:
		// IPv4 frontends arrive as ::ffff:a.b.c.d on the IPv6 hooks.
		c, err := net.ListenUDP("udp", nil)
		if err != nil {
			return "", "", "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(timeout))
		if _, err := c.WriteToUDP([]byte("hi"), to); err != nil {
			return "", "", "", err
		}
		buf := make([]byte, 256)
		n, src, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			return "", "", "", fmt.Errorf("%s %s: %w", mode, addr, err)
		}
		line = string(buf[:n])
		from = net.UDPAddrFromAddrPort(src).String()
		if src.Addr().Is4In6() {
			from = fmt.Sprintf("%v:%d", src.Addr().Unmap(), src.Port())
		}
	default:
		return "", "", "", fmt.Errorf("mode %q: use tcp, udp or udp-unconnected", mode)
	}
	name, peer, err = labnet.ParseEcho(line)
	return name, peer, from, err
}

// hostAnswer is one line of a client's output.
type hostAnswer struct{ name, peer, from string }

var cgroupSeq atomic.Int32

// testCgroup creates a cgroup v2 directory for the test and removes it at
// the end (registered first, so it runs after the cleanups that detach).
func testCgroup(t *testing.T, name string) string {
	t.Helper()
	root, err := lbbpf.CgroupRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, fmt.Sprintf("swiftlane-e2e-%d-%d-%s", os.Getpid(), cgroupSeq.Add(1), name))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove cgroup: %v", err)
		}
	})
	return dir
}

// runClient runs n requests of mode to addr from a client process started
// inside cgroup (clone3 CLONE_INTO_CGROUP: it never runs outside it) in the
// network namespace ns.
func runClient(ns labnet.NS, cgroup, mode, addr string, n int) ([]hostAnswer, error) {
	fd, err := syscall.Open(cgroup, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	cmd := exec.Command("nsenter", "--net=/run/netns/"+ns.Name, os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %d", hostClientEnv, mode, addr, n))
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s%s", err, out, ee.Stderr)
		}
		return nil, fmt.Errorf("client %s %s from %s: %w", mode, addr, ns.Name, err)
	}
	var as []hostAnswer
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			return nil, fmt.Errorf("client %s %s: unexpected line %q", mode, addr, l)
		}
		as = append(as, hostAnswer{f[0], f[1], f[2]})
	}
	return as, nil
}

// attachHost attaches the socket programs to a new cgroup, for the node's
// network namespace, and returns the cgroup.
func (e *env) attachHost(pinDir string) string {
	e.t.Helper()
	cg := testCgroup(e.t, "host")
	var a *lbbpf.CgroupAttachment
	if err := e.topo.Node.Do(func() (err error) {
		a, err = e.lb.Datapath().AttachCgroup(cg, pinDir)
		return err
	}); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { a.Close() })
	return cg
}

// conntrackEntry is one `conntrack -L` line: the original and the reply
// direction's addresses and ports.
type conntrackEntry struct {
	line       string
	orig, repl [4]string // src, dst, sport, dport
}

func (e *env) conntrackEntries() []conntrackEntry {
	e.t.Helper()
	// Without its summary (stderr), which would interleave with the lines.
	out, err := e.topo.Node.Run("sh", "-c", "conntrack -L 2>/dev/null")
	if err != nil {
		e.t.Fatal(err)
	}
	var es []conntrackEntry
	for _, l := range strings.Split(out, "\n") {
		if !strings.Contains(l, "src=") {
			continue // the summary line
		}
		c := conntrackEntry{line: l}
		seen := map[string]int{}
		for _, f := range strings.Fields(l) {
			k, v, ok := strings.Cut(f, "=")
			i := map[string]int{"src": 0, "dst": 1, "sport": 2, "dport": 3}
			if idx, known := i[k]; ok && known {
				if seen[k] == 0 {
					c.orig[idx] = v
				} else {
					c.repl[idx] = v
				}
				seen[k]++
			}
		}
		es = append(es, c)
	}
	return es
}

// noServiceInConntrack fails unless every conntrack entry in the node is a
// plain, untranslated connection (the reply is the original reversed) and
// none names a frontend: the kernel's connection tracking never saw a
// Service address, so no NAT of it happened there.
func (e *env) noServiceInConntrack(frontends ...string) int {
	e.t.Helper()
	es := e.conntrackEntries()
	for _, c := range es {
		if c.orig[0] != c.repl[1] || c.orig[1] != c.repl[0] || c.orig[2] != c.repl[3] || c.orig[3] != c.repl[2] {
			e.t.Errorf("conntrack entry with NAT: %s", c.line)
		}
		for _, fe := range frontends {
			host, port, _ := net.SplitHostPort(fe)
			if (c.orig[1] == host && c.orig[3] == port) || (c.repl[0] == host && c.repl[2] == port) {
				e.t.Errorf("conntrack entry for frontend %s: %s", fe, c.line)
			}
		}
	}
	return len(es)
}

// hostCase is requests of one mode to one frontend from the node.
type hostCase struct{ what, mode, addr string }

// askFromNode runs each case n times from the node's namespace in cgroup
// and checks that the application saw every answer come from the frontend
// it addressed. It returns the answers by case.
func (e *env) askFromNode(cgroup string, n int, cases ...hostCase) map[hostCase][]hostAnswer {
	e.t.Helper()
	got := map[hostCase][]hostAnswer{}
	for _, c := range cases {
		as, err := runClient(e.topo.Node, cgroup, c.mode, c.addr, n)
		if err != nil {
			e.t.Fatalf("%s: %v", c.what, err)
		}
		for _, a := range as {
			// The application sees the Service's address, not the backend's.
			if a.from != c.addr {
				e.t.Errorf("%s: the client saw the answer come from %s, want %s", c.what, a.from, c.addr)
			}
		}
		got[c] = as
	}
	return got
}

// spread fails unless the answers came from every backend.
func (e *env) spread(what string, as []hostAnswer) {
	e.t.Helper()
	seen := map[string]int{}
	for _, a := range as {
		seen[a.name]++
	}
	if len(seen) != backends {
		e.t.Errorf("%s: %d sockets reached %v, want all %d backends", what, len(as), seen, backends)
	}
}

func TestHostTraffic(t *testing.T) {
	e := setup(t)
	cg := e.attachHost("")
	got := e.askFromNode(cg, 30,
		hostCase{"ClusterIP TCP", "tcp", "10.96.0.10:80"},
		hostCase{"ClusterIP UDP connected", "udp", "10.96.0.10:53"},
		hostCase{"ClusterIP UDP unconnected", "udp-unconnected", "10.96.0.10:53"},
		hostCase{"NodePort TCP", "tcp", "198.18.0.1:30080"},
		hostCase{"NodePort UDP connected", "udp", "198.18.0.1:30053"},
		hostCase{"NodePort UDP unconnected", "udp-unconnected", "198.18.0.1:30053"},
	)
	for c, as := range got {
		e.spread(c.what, as)
		for _, a := range as {
			// The backend sees the node's own address on its link: the
			// socket went to the backend directly, nothing rewrote it.
			var i int
			if _, err := fmt.Sscanf(a.name, "b%d", &i); err != nil || i >= backends {
				t.Fatalf("%s: answered by %q, not a backend of web", c.what, a.name)
			}
			if want := fmt.Sprintf("10.244.%d.1:", 2+i); !strings.HasPrefix(a.peer, want) {
				t.Errorf("%s: %s saw %s, want the node's address %s*", c.what, a.name, a.peer, want)
			}
		}
	}
	st, err := e.lb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.FwdPackets != 0 || st.SessionsCreated != 0 {
		t.Errorf("stats %+v: the node's own connections went through the tc path", st)
	}
	// Counted by call: 4 cases x 30 connect (TCP, connected UDP), 2 x 30
	// unconnected datagrams.
	if st.HostConnects != 120 || st.HostDatagrams != 60 || st.HostRefused != 0 {
		t.Errorf("host counters: %d connects, %d datagrams, %d refused; want 120, 60, 0", st.HostConnects, st.HostDatagrams, st.HostRefused)
	}
	// Conntrack is active in the node (the nft rules of TrackConnections)
	// and tracks the node's own connections to the backends like any
	// other it makes; what must not appear is a Service address.
	frontends := []string{"10.96.0.10:80", "10.96.0.10:53", "198.18.0.1:30080", "198.18.0.1:30053"}
	if n := e.noServiceInConntrack(frontends...); n == 0 {
		t.Fatal("no conntrack entries at all: the node's connections were not tracked, so the check above proves nothing")
	}
}

// IPv6 frontends from IPv6 sockets, and an IPv4 one from a dual-stack
// socket (udp-unconnected: the IPv6 hooks see ::ffff:a.b.c.d).
func TestHostTrafficIPv6(t *testing.T) {
	e := setupWith(t, dualStackConfig)
	cg := e.attachHost("")
	got := e.askFromNode(cg, 30,
		hostCase{"IPv6 ClusterIP TCP", "tcp", net.JoinHostPort(dualVIP6, "80")},
		hostCase{"IPv6 ClusterIP UDP unconnected", "udp-unconnected", net.JoinHostPort(dualVIP6, "53")},
		hostCase{"IPv6 NodePort TCP", "tcp", net.JoinHostPort(e.topo.NodeIP6.String(), "30050")},
		hostCase{"IPv4 ClusterIP from a dual-stack socket", "udp-unconnected", net.JoinHostPort(dualVIP4, "53")},
	)
	for c, as := range got {
		e.spread(c.what, as)
	}
	if n := e.noServiceInConntrack(net.JoinHostPort(dualVIP6, "80"), net.JoinHostPort(dualVIP6, "53"),
		net.JoinHostPort(e.topo.NodeIP6.String(), "30050"), net.JoinHostPort(dualVIP4, "53")); n == 0 {
		t.Fatal("no conntrack entries at all: the node's connections were not tracked")
	}
}

// The socket path chooses with the tc path's pick_backend, affinity
// included: a Service with ClientIP affinity sends all of the node's
// connections (one client) to one backend.
func TestHostTrafficAffinity(t *testing.T) {
	e := setupWith(t, featuresConfig("1h", []int{0, 1, 2}))
	cg := e.attachHost("")
	addr := net.JoinHostPort(stickyVIP, "80")
	as := e.askFromNode(cg, 20, hostCase{"sticky", "tcp", addr})[hostCase{"sticky", "tcp", addr}]
	seen := map[string]int{}
	for _, a := range as {
		seen[a.name]++
	}
	if len(seen) != 1 {
		t.Fatalf("the node's 20 connections to a ClientIP-affinity Service reached %v, want one backend", seen)
	}
	if st, _ := e.lb.Stats(); st.AffinityHits != 0 {
		t.Fatalf("stats %+v: the tc path counted affinity hits for the node's connections", st)
	}
}

func TestHostTrafficControls(t *testing.T) {
	e := setup(t)
	cg := e.attachHost("")
	// Control: a process outside the attached cgroup is not translated.
	// The node has no route to the ClusterIP and nothing listens on the
	// NodePort, so both fail at once.
	other := testCgroup(t, "other")
	for _, addr := range []string{"10.96.0.10:80", "198.18.0.1:30080"} {
		if as, err := runClient(e.topo.Node, other, "tcp", addr, 1); err == nil {
			t.Fatalf("%s from a cgroup without the programs was answered (%v): the test cannot tell translation from none", addr, as)
		}
	}
	// A pod's process in the attached cgroup stays on the tc path: its
	// connection is translated there (counted, no conntrack entry), and the
	// backend sees the pod's address.
	as, err := runClient(e.topo.Client, cg, "tcp", "10.96.0.10:80", 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if !strings.HasPrefix(a.peer, e.topo.ClientIP.String()+":") || a.from != "10.96.0.10:80" {
			t.Fatalf("pod client: %+v, want the backend to see %s and the client 10.96.0.10:80", a, e.topo.ClientIP)
		}
	}
	if st, _ := e.lb.Stats(); st.SessionsCreated != 5 {
		t.Fatalf("stats %+v: want the pod's 5 connections translated at tc", st)
	}
	e.noConntrack()
	// A frontend with no backend refuses at connect, not after a timeout.
	e.apply(strings.Replace(e.cfg, "endpoints: [{address: "+e.topo.BackendIPs[0].String()+"}]", "endpoints: []", 1))
	if _, err := runClient(e.topo.Node, cg, "tcp", "10.96.0.20:80", 1); err == nil || !strings.Contains(err.Error(), "operation not permitted") {
		t.Fatalf("a frontend without backends: %v, want connect refused with EPERM", err)
	}
	if st, _ := e.lb.Stats(); st.HostRefused != 1 || st.HostConnects != 0 {
		t.Fatalf("host counters %d refused, %d connects: want the one refusal, and the pod's connections not counted", st.HostRefused, st.HostConnects)
	}
}

// attachedConnect4 is how many programs the cgroup has at connect4.
func attachedConnect4(t *testing.T, cgroup string) int {
	t.Helper()
	f, err := os.Open(cgroup)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: ebpf.AttachCGroupInet4Connect})
	if err != nil {
		t.Fatal(err)
	}
	return len(r.Programs)
}

// The real binary with --host-cgroup and pinning: the node's connections
// are balanced; a SIGKILL leaves the pinned programs translating; the next
// start takes the pinned links over instead of attaching a second set;
// a start with --host-cgroup= detaches them.
func TestHostTrafficRuntime(t *testing.T) {
	labnet.RequireRoot(t)
	bin, err := buildSwiftlane()
	if err != nil {
		t.Fatal(err)
	}
	cg := testCgroup(t, "runtime")
	pins := filepath.Join(mountBPFFS(t), "lb")
	topo := echoTopology(t)
	cfg := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(cfg, []byte(config(topo, nil)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { topo.Node.Do(func() error { return lbbpf.Cleanup(pins) }) })
	reaches := func(when string) {
		t.Helper()
		for _, c := range []struct{ mode, addr string }{{"tcp", "10.96.0.10:80"}, {"udp-unconnected", "198.18.0.1:30053"}} {
			as, err := runClient(topo.Node, cg, c.mode, c.addr, 3)
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			if as[0].from != c.addr {
				t.Fatalf("%s: %s %s answered from %s", when, c.mode, c.addr, as[0].from)
			}
		}
	}
	args := []string{"--config", cfg, "--pin-dir", pins, "--host-cgroup", cg}

	p := startLB(t, bin, topo.Node, args...)
	reaches("started")
	signal(t, p, syscall.SIGKILL)
	reaches("after SIGKILL (pinned)")
	p = startLB(t, bin, topo.Node, args...)
	reaches("restarted")
	if n := attachedConnect4(t, cg); n != 1 {
		t.Fatalf("after a restart the cgroup has %d connect4 programs, want the pinned link taken over (1)", n)
	}
	p.Stop(10 * time.Second)

	p = startLB(t, bin, topo.Node, "--config", cfg, "--pin-dir", pins, "--host-cgroup=")
	defer p.Stop(10 * time.Second)
	// Removing a pin drops the link's last reference, but the kernel frees
	// (detaches) it from a work queue, a moment later.
	if !waitUntil(t, "the unpinned links to detach", 5*time.Second, func() bool { return attachedConnect4(t, cg) == 0 }) {
		t.Fatalf("with --host-cgroup= the cgroup still has %d connect4 programs", attachedConnect4(t, cg))
	}
	if _, err := runClient(topo.Node, cg, "tcp", "10.96.0.10:80", 1); err == nil {
		t.Fatal("with --host-cgroup= the node's connection to the ClusterIP is still translated")
	}
}
