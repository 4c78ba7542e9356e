// SPDX-License-Identifier: Apache-2.0
//go:build vmtest

package vm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/swiftlane/swiftlane/internal/gtplab"
)

// The automatic mode end to end: a UPF (the kernel's gtp, then free5GC's
// gtp5g), our gNB, the UE's pings, the tracer and the operator inside
// `swiftlane run`.
func TestGTPAutomatic(t *testing.T) { forEachUPF(t, testGTPAutomatic) }

func testGTPAutomatic(t *testing.T, upf string) {
	startLabUPF(t, upf)
	// The gNB also reads and writes the UE's tunnel (uesimtun0), which
	// would make it a carrier by itself: with the tun driver untraced, it
	// is prioritised for GTP-U work or not at all. The idle timeout leaves
	// room for a loaded host between a ping and the checks that follow it
	// (4 s was not enough with the host's two CPUs shared by other VMs).
	p := startScheduler(t, `
automatic:
  enabled: true
  idle_timeout_ms: 10000
  tun_devices: []
`)
	waitTracer(t, p, upf)

	g := startGnb(t)
	uePing(t, 5)
	st, err := (&gtplab.Lab{T: gtplab.Default()}).Stats()
	if err != nil || st.RxPackets < 5 || st.TxPackets < 5 {
		t.Fatalf("%s device counters %+v (%v): the pings did not go through GTP-U", upf, st, err)
	}
	lat := waitGTPCarrier(t, p, g.Process.Pid, upf)
	t.Logf("gNB pid %d prioritised %.3f ms after its first GTP-U packet", g.Process.Pid, lat)

	// /metrics lists it with the packets it carried, counted in BPF: more
	// pings, more packets.
	packets := fmt.Sprintf("swiftlane_gtp_carrier_packets_total{class=critical}{command=swiftlane}{pid=%d}", g.Process.Pid)
	m := p.waitMetric(t, "the gNB as a carrier in /metrics", func(m map[string]float64) bool {
		return m["swiftlane_gtp_carriers"] == 1 && m[packets] >= 1
	})
	before := m[packets]
	uePing(t, 5)
	m = p.waitMetric(t, "the gNB's packet count to grow", func(m map[string]float64) bool { return m[packets] > before })
	t.Logf("gNB carried %.0f GTP-U packets in its own context (%.0f before the last 5 pings)", m[packets], before)

	// Exit: the operator forgets it with the scheduler's exit event.
	g.kill()
	waitOutput(t, p.out, regexp.MustCompile(fmt.Sprintf(`GTP-U carrier exited" pid=%d`, g.Process.Pid)), "the exit to be handled")
	p.waitMetric(t, "no carrier in /metrics after the exit", func(m map[string]float64) bool {
		_, left := m[packets]
		return m["swiftlane_gtp_carriers"] == 0 && !left
	})

	// Restart: the new process is prioritised on its first packet.
	g2 := startGnb(t)
	uePing(t, 3)
	lat = waitGTPCarrier(t, p, g2.Process.Pid, upf)
	if lat > 100 {
		t.Errorf("restarted gNB prioritised after %.3f ms, want <= 100 ms", lat)
	}

	// Idle: no traffic for the idle timeout removes the entry.
	waitOutput(t, p.out, regexp.MustCompile(fmt.Sprintf(`carrier idle: entry removed" pid=%d`, g2.Process.Pid)), "the idle entry to decay")

	// Softirq: delay N3 with netem so the UPF side runs from the qdisc's
	// timer, not in the gNB's system call; it is reported as a CPU.
	if out, err := exec.Command("ip", "netns", "exec", "swl-gnb", "tc", "qdisc", "add", "dev", "n3", "root", "netem", "delay", "2ms").CombinedOutput(); err != nil {
		t.Fatalf("netem: %v: %s", err, out)
	}
	uePing(t, 5)
	waitOutput(t, p.out, regexp.MustCompile(`GTP-U work in softirq: reported as its CPU, not prioritised" cpu=\d+ context=(idle|kthread|interrupt|backlog)`), "a softirq report")

	// Someone else's call: a process busy in packet-moving system calls on
	// every CPU runs the delayed GTP-U packets whenever the qdisc's timer
	// fires inside one of its calls (on IRQ exit or its bh-enable). It did
	// not send them: reported as the CPU's backlog, never prioritised. The
	// operator logs a CPU's backlog once, and the gNB's own calls may have
	// taken that line already (it happened on a loaded host): a second,
	// bare tracer (`swiftlane trace gtp`, every event with its context and
	// command) shows the case independently of that.
	bare := startChild(t, exec.Command(swiftlaneBin(t), "trace", "gtp"), `swiftlane: tracing`, "a bare GTP-U tracer")
	chatty := startChild(t, helperCmd("chatty"), "chatty ready", "the chatty helper")
	backlog := regexp.MustCompile(`GTP-U work in softirq: reported as its CPU, not prioritised" cpu=\d+ context=backlog .*comm=swl-chatty`)
	bareBacklog := regexp.MustCompile(`softirq \(backlog, swl-chatty\)`)
	seen := func() bool { return backlog.MatchString(p.out.String()) || bareBacklog.MatchString(bare.out.String()) }
	credited := regexp.MustCompile(fmt.Sprintf(`carrier prioritised" pid=%d `, chatty.Process.Pid))
	for i := 0; i < 20 && !seen() && !credited.MatchString(p.out.String()); i++ {
		uePing(t, 5)
	}
	if credited.MatchString(p.out.String()) {
		t.Fatalf("the chatty helper was prioritised for GTP-U packets it did not send:\n%s", p.out)
	}
	if !seen() {
		t.Fatalf("100 delayed pings and no GTP-U packet ran in the chatty helper's calls (the case this test is about):\n%s", p.out)
	}
}

// The same automatic mode in the node agent, beside the agent's own
// strategies. The agent's control plane is left unreachable: the agent keeps
// scheduling without it, and it is not what this test is about.
func TestGTPAutomaticAgent(t *testing.T) { forEachUPF(t, testGTPAutomaticAgent) }

func testGTPAutomaticAgent(t *testing.T, upf string) {
	startLabUPF(t, upf)
	cfg := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(cfg, []byte("automatic:\n  enabled: true\n  idle_timeout_ms: 10000\n  tun_devices: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(swiftlaneBin(t), "agent", "--config", cfg, "--server", "https://127.0.0.1:1", "--node", "vm1",
		"--state-file", "", "--metrics-addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "SWIFTLANE_TOKEN=unused")
	p := startProc(t, cmd, "scheduler attached; agent running", "swiftlane", userAttachTimeout)
	waitTracer(t, p, upf)

	g := startGnb(t)
	uePing(t, 5)
	lat := waitGTPCarrier(t, p, g.Process.Pid, upf)
	t.Logf("gNB pid %d prioritised by the agent %.3f ms after its first GTP-U packet", g.Process.Pid, lat)
	g.kill()
	waitOutput(t, p.out, regexp.MustCompile(fmt.Sprintf(`GTP-U carrier exited" pid=%d`, g.Process.Pid)), "the exit to be handled")
}

// A UE simulator's tunnel: the process that reads and writes a TUN named
// like UERANSIM's (uesimtun*, the default automatic.tun_devices) is found by
// the tracer with no GTP-U and no companions regex; a busier process on
// another TUN device (a VPN's) is not, not even through the GTP-U packets
// its writes' bh-enable may run (an earlier test's lab being torn down once
// gave it gtp_dev_xmit packets, before the tracer told them apart).
func TestGTPAutomaticTUN(t *testing.T) {
	gtplab.EnsureTUNDevice() // the tun driver's BTF must be there when the tracer loads
	p := startScheduler(t, "automatic:\n  enabled: true\n  idle_timeout_ms: 1500\n")
	waitOutput(t, p.out, regexp.MustCompile(`automatic mode: tracing GTP-U" functions="?\[[^]]*tun_get_user tun_do_read\]`), "the tracer to attach to the tun driver")

	vpn := startTUNUser(t, "vpn7", 2*time.Millisecond)
	ue := startTUNUser(t, "uesimtun7", 20*time.Millisecond)
	waitCarrier(t, p, ue.Process.Pid)
	waitOutput(t, p.out, regexp.MustCompile(`TUN device not in automatic.tun_devices: its users are not prioritised" device=vpn7 pid=`+strconv.Itoa(vpn.Process.Pid)), "the VPN's device to be passed over")
	packets := fmt.Sprintf("swiftlane_gtp_carrier_packets_total{class=critical}{command=swl-tun-user}{pid=%d}", ue.Process.Pid)
	p.waitMetric(t, "the UE simulator's tunnel packets in /metrics", func(m map[string]float64) bool { return m[packets] >= 10 })
	t.Logf("the UE simulator's tunnel carried %.0f packets", p.scrape(t)[packets])
	if regexp.MustCompile(fmt.Sprintf(`carrier prioritised" pid=%d `, vpn.Process.Pid)).MatchString(p.out.String()) {
		t.Fatalf("the process on vpn7 was prioritised:\n%s", p.out)
	}
	ue.kill()
	waitOutput(t, p.out, regexp.MustCompile(fmt.Sprintf(`GTP-U carrier exited" pid=%d`, ue.Process.Pid)), "the exit to be handled")
}

// startTUNUser runs the tun helper (a process named swl-tun-user) on a new
// TUN device, writing a packet into it every interval and reading it.
func startTUNUser(t *testing.T, dev string, every time.Duration) *child {
	t.Helper()
	cmd := helperCmd("tun")
	cmd.Env = append(cmd.Env, "SWL_TUN_DEVICE="+dev, "SWL_TUN_EVERY="+every.String())
	return startChild(t, cmd, `tun ready`, "the TUN user on "+dev)
}

// tunHelper moves packets through a TUN device like a UE simulator: it
// writes a UDP datagram into the device (the kernel routes it to a
// blackhole) and reads whatever the device has for it, every SWL_TUN_EVERY.
func tunHelper(dev string) int {
	every, err := time.ParseDuration(os.Getenv("SWL_TUN_EVERY"))
	if err != nil || dev == "" {
		fmt.Fprintln(os.Stderr, "tun helper: set SWL_TUN_DEVICE and SWL_TUN_EVERY")
		return 2
	}
	// The operator names carriers by the command of the thread it saw: one
	// name for both helpers, on the one thread that does the I/O.
	runtime.LockOSThread()
	unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&[]byte("swl-tun-user\x00")[0])), 0, 0, 0)
	fd, link, err := gtplab.OpenTUN(dev)
	if err == nil {
		err = netlink.LinkSetUp(link)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tun helper:", err)
		return 1
	}
	pkt := udpPacket(net.IPv4(10, 99, 0, 1), net.IPv4(10, 99, 0, 2), []byte("swiftlane"))
	buf := make([]byte, 2048)
	fmt.Println("tun ready")
	for range time.Tick(every) {
		if _, err := unix.Write(fd, pkt); err != nil {
			fmt.Fprintln(os.Stderr, "tun helper: write:", err)
			return 1
		}
		unix.Read(fd, buf) // EAGAIN when empty: the read path runs all the same
	}
	return 0
}

// helperCmd runs this test binary as the helper kind.
func helperCmd(kind string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SWL_HELPER="+kind)
	return cmd
}

// chattyHelper keeps every CPU busy in packet-moving system calls: one
// thread per CPU, each sending a datagram to itself over loopback and
// reading it back, as fast as it can (a chatty sidecar, at its worst).
func chattyHelper() int {
	ready := make(chan error)
	for range runtime.NumCPU() {
		go func() {
			runtime.LockOSThread()
			unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&[]byte("swl-chatty\x00")[0])), 0, 0, 0)
			c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			ready <- err
			if err != nil {
				return
			}
			raw, _ := c.SyscallConn()
			buf := make([]byte, 64)
			raw.Control(func(fd uintptr) { // blocking calls on this thread, no poller
				to, _ := unix.Getsockname(int(fd))
				for {
					unix.Sendto(int(fd), buf, 0, to)
					unix.Recvfrom(int(fd), buf, 0)
				}
			})
		}()
	}
	for range runtime.NumCPU() {
		if err := <-ready; err != nil {
			fmt.Fprintln(os.Stderr, "chatty helper:", err)
			return 1
		}
	}
	fmt.Println("chatty ready")
	select {}
}

// udpPacket builds an IPv4/UDP datagram (UDP checksum left 0: none).
func udpPacket(src, dst net.IP, payload []byte) []byte {
	p := make([]byte, 28+len(payload))
	p[0], p[8], p[9] = 0x45, 64, unix.IPPROTO_UDP
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	copy(p[12:16], src.To4())
	copy(p[16:20], dst.To4())
	binary.BigEndian.PutUint16(p[10:], gtplab.Checksum(p[:20]))
	binary.BigEndian.PutUint16(p[20:], 40000)
	binary.BigEndian.PutUint16(p[22:], 9)
	binary.BigEndian.PutUint16(p[24:], uint16(8+len(payload)))
	copy(p[28:], payload)
	return p
}

// forEachUPF runs f as a subtest per UPF module: the kernel's gtp, and
// free5GC's gtp5g where lab/gtp5g.sh could build it for the running kernel
// (skipped with its reason where the kernel has no headers package).
func forEachUPF(t *testing.T, f func(t *testing.T, upf string)) {
	for _, upf := range []string{gtplab.UPFGTP, gtplab.UPFGTP5G} {
		t.Run(upf, func(t *testing.T) {
			if upf == gtplab.UPFGTP5G {
				// Loaded before the scheduler starts: the tracer resolves
				// the module's BTF once, at start.
				if err := gtplab.LoadGTP5G(); errors.Is(err, gtplab.ErrGTP5GUnavailable) {
					t.Skip(err)
				} else if err != nil {
					t.Fatal(err)
				}
			}
			f(t, upf)
		})
	}
}

// upfFunctions are the tracer's functions for each UPF module: all must
// attach in the lab kernels (none is absent or inlined there).
var upfFunctions = map[string][]string{
	gtplab.UPFGTP:   {"gtp_encap_recv", "gtp_rx", "gtp_dev_xmit", "gtp_push_header", "gtp_build_skb_outer_ip4"},
	gtplab.UPFGTP5G: {"gtp5g_encap_recv", "gtp5g_handle_skb_ipv4", "gtp5g_xmit_skb_ipv4", "gtp5g_push_header", "pdr_find_by_gtp1u", "ip4_find_route"},
}

// waitTracer waits for automatic mode to trace GTP-U with its sender marks
// and checks that every function of the UPF's module is attached; a
// function the tracer passed over fails the test with the tracer's reason.
func waitTracer(t *testing.T, p *schedProc, upf string) {
	t.Helper()
	line := waitOutput(t, p.out, regexp.MustCompile(`automatic mode: tracing GTP-U" functions="?\[([^]]*)\].* sender_marks=true`), "the tracer to attach with its sender marks")
	traced := strings.Fields(line[1])
	for _, fn := range upfFunctions[upf] {
		if !slices.Contains(traced, fn) {
			why := regexp.MustCompile(`GTP-U function not traced" function=` + fn + ` reason=.*`).FindString(p.out.String())
			t.Errorf("%s function %s not traced (%s); traced: %v", upf, fn, why, traced)
		}
	}
}

// startLab runs `swiftlane lab up` with the kernel's gtp UPF.
func startLab(t *testing.T) {
	t.Helper()
	startLabUPF(t, gtplab.UPFGTP)
}

// startLabUPF runs `swiftlane lab up` with the UPF module upf, and takes it
// down when the test ends.
func startLabUPF(t *testing.T, upf string) {
	t.Helper()
	exec.Command(swiftlaneBin(t), "lab", "down").Run() // leftovers of an earlier run
	cmd := exec.Command(swiftlaneBin(t), "lab", "up", "--upf", upf)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGINT) // lab up removes its namespaces
		select {
		case <-done:
		case <-time.After(stateTimeout):
			cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("lab output:\n%s", out)
		}
	})
	waitOutputOrExit(t, out, regexp.MustCompile(`lab up:`), "the lab to come up", done)
}

// child is a process a test started; done closes when it has exited (the
// one goroutine that waits for it: a second concurrent Wait can block
// forever).
type child struct {
	*exec.Cmd
	done chan struct{}
	out  *syncBuffer
}

func (c *child) kill() {
	c.Process.Kill()
	<-c.done
}

// startChild starts cmd, kills it when the test ends, and returns once its
// output matches ready (failing with the output if it exits first).
func startChild(t *testing.T, cmd *exec.Cmd, ready, what string) *child {
	t.Helper()
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	waitOutputOrExit(t, out, regexp.MustCompile(ready), what, done)
	return &child{Cmd: cmd, done: done, out: out}
}

// startGnb runs the lab's gNB.
func startGnb(t *testing.T) *child {
	t.Helper()
	return startChild(t, exec.Command(swiftlaneBin(t), "lab", "gnb"), `gnb ready`, "the gNB")
}

func uePing(t *testing.T, n int) {
	t.Helper()
	// Bounded: a ping that never returns must fail the test with its
	// output, not hold the VM until the lab's timeout.
	ctx, cancel := context.WithTimeout(context.Background(), attachTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, swiftlaneBin(t), "lab", "ping", "-c", strconv.Itoa(n), "-i", "10ms").CombinedOutput()
	if err != nil {
		t.Fatalf("UE ping through GTP-U: %v\n%s", err, out)
	}
}

var carrierRE = `GTP-U carrier prioritised" pid=%d .*first_packet_to_map_ms=([0-9.]+)`

// waitGTPCarrier is waitCarrier for a process that must be prioritised for
// a function of the UPF module upf (the first one it was seen in).
func waitGTPCarrier(t *testing.T, p *schedProc, pid int, upf string) float64 {
	t.Helper()
	lat := waitCarrier(t, p, pid)
	m := regexp.MustCompile(fmt.Sprintf(`GTP-U carrier prioritised" pid=%d .*function=(\S+)`, pid)).FindStringSubmatch(p.out.String())
	if m == nil || !slices.Contains(upfFunctions[upf], m[1]) {
		t.Fatalf("pid %d prioritised for %v, want one of the %s functions %v", pid, m, upf, upfFunctions[upf])
	}
	return lat
}

// waitCarrier waits for the operator's entry for pid and returns the
// first-packet → map latency it measured, in ms.
func waitCarrier(t *testing.T, p *schedProc, pid int) float64 {
	t.Helper()
	m := waitOutput(t, p.out, regexp.MustCompile(fmt.Sprintf(carrierRE, pid)), fmt.Sprintf("the gNB (pid %d) to be prioritised", pid))
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// waitOutput waits until a process's output matches re (the process logs
// each decision as it makes it) and returns the submatches.
func waitOutput(t *testing.T, out *syncBuffer, re *regexp.Regexp, what string) []string {
	t.Helper()
	return waitOutputOrExit(t, out, re, what, nil)
}

func waitOutputOrExit(t *testing.T, out *syncBuffer, re *regexp.Regexp, what string, done <-chan struct{}) []string {
	t.Helper()
	deadline := time.Now().Add(attachTimeout) // under TCG, setting up the lab alone takes tens of seconds
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m
		}
		select {
		case <-done:
			t.Fatalf("exited while waiting for %s:\n%s", what, out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s:\n%s", what, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
