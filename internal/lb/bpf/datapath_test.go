// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/swiftlane/swiftlane/internal/lb/labnet"
)

// BPF_PROG_TEST_RUN tests: crafted packets through the real program with
// fib_redirect off, so the rewritten packet comes back to us.

const (
	actOK    = 0
	actShot  = 2
	actUnspc = math.MaxUint32 // TC_ACT_UNSPEC (-1): not ours
)

// Each role's IPv4 and IPv6 address.
var (
	vip, vip6           = netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd00:96::10")
	client, client6     = netip.MustParseAddr("10.244.1.2"), netip.MustParseAddr("fd00:244:1::2")
	backendA, backend6A = netip.MustParseAddr("10.244.2.2"), netip.MustParseAddr("fd00:244:2::2")
	backendB            = netip.MustParseAddr("10.244.3.2")
	nodeIP, node6       = netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("fd00:18::1")
	extIP, ext6         = netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("fd00:18::2")
	hairpin, hairpin6   = netip.MustParseAddr("169.254.42.1"), netip.MustParseAddr("fd00:5c:1::1")
)

func ap(a netip.Addr, p uint16) netip.AddrPort { return netip.AddrPortFrom(a, p) }

func testConstants() Constants {
	return Constants{
		SNATPortMin: 32768, SNATPortMax: 60999,
		NodePortMin: 30000, NodePortMax: 32767,
		HairpinAddr: hairpin,
	}
}

func load(t testing.TB, c Constants) *Datapath {
	t.Helper()
	labnet.RequireRoot(t)
	d, err := Load(c)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			t.Fatalf("verifier: %+v", ve)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// run feeds one packet and returns the verdict and the packet afterwards.
func run(t *testing.T, d *Datapath, in []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, len(in)+256)
	ret, err := d.Program().Run(&ebpf.RunOptions{Data: in, DataOut: out})
	if err != nil {
		t.Fatalf("prog test run: %v", err)
	}
	return ret, out
}

// service installs fe -> backends with ids 1..n.
func service(t *testing.T, d *Datapath, fe Frontend, snat bool, bes ...netip.AddrPort) {
	t.Helper()
	var ids []uint32
	var flags ServiceFlags
	if snat {
		flags = FlagSNAT
	}
	for i, b := range bes {
		id := uint32(100*fe.Port) + uint32(i) + 1
		if err := d.PutBackend(id, b); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := d.PutService(fe, ServiceEntry{ID: uint32(fe.Port), Flags: flags, Slots: ids}, ServiceEntry{}); err != nil {
		t.Fatal(err)
	}
}

func expect(t *testing.T, what string, got parsed, src, dst netip.AddrPort) {
	t.Helper()
	if got.src != src.Addr() || got.dst != dst.Addr() || got.sport != src.Port() || got.dport != dst.Port() {
		t.Fatalf("%s: got %v:%d -> %v:%d, want %v -> %v", what, got.src, got.sport, got.dst, got.dport, src, dst)
	}
	if !got.ipOK || !got.l4OK {
		t.Fatalf("%s: checksums ip ok=%v l4 ok=%v", what, got.ipOK, got.l4OK)
	}
}

func TestClusterIPDNATAndReverse(t *testing.T) {
	for _, proto := range []Proto{TCP, UDP} {
		t.Run(proto.String(), func(t *testing.T) {
			d := load(t, testConstants())
			service(t, d, Frontend{vip, 80, proto}, false, ap(backendA, 8080))

			ret, out := run(t, d, pkt{src: ap(client, 40000), dst: ap(vip, 80), proto: proto, tcpFlags: 0x02, payload: []byte("hello")}.bytes())
			if ret != actOK {
				t.Fatalf("forward verdict %d, want TC_ACT_OK", int32(ret))
			}
			expect(t, "forward", parse(t, out), ap(client, 40000), ap(backendA, 8080))

			ret, out = run(t, d, pkt{src: ap(backendA, 8080), dst: ap(client, 40000), proto: proto, tcpFlags: 0x12, payload: []byte("world")}.bytes())
			if ret != actOK {
				t.Fatalf("reply verdict %d", int32(ret))
			}
			expect(t, "reply", parse(t, out), ap(vip, 80), ap(client, 40000))

			ss, err := d.Sessions()
			if err != nil {
				t.Fatal(err)
			}
			if len(ss) != 2 {
				t.Fatalf("%d session entries, want a forward+reply pair: %+v", len(ss), ss)
			}
			st, _ := d.Stats()
			if st.FwdPackets != 1 || st.ReplyPackets != 1 || st.SessionsCreated != 1 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestNonServiceTrafficUntouched(t *testing.T) {
	d := load(t, testConstants())
	service(t, d, Frontend{vip, 80, TCP}, false, ap(backendA, 8080))
	for name, p := range map[string]pkt{
		"other port":  {src: ap(client, 40000), dst: ap(vip, 81), proto: TCP},
		"other proto": {src: ap(client, 40000), dst: ap(vip, 80), proto: UDP},
		"other addr":  {src: ap(client, 40000), dst: ap(backendB, 80), proto: TCP},
	} {
		in := p.bytes()
		ret, out := run(t, d, in)
		if ret != actUnspc || string(out[:len(in)]) != string(in) {
			t.Errorf("%s: verdict %d, packet changed=%v; want TC_ACT_UNSPEC and unchanged", name, int32(ret), string(out[:len(in)]) != string(in))
		}
	}
}

func TestUDPZeroChecksumStaysZero(t *testing.T) {
	d := load(t, testConstants())
	service(t, d, Frontend{vip, 53, UDP}, false, ap(backendA, 5353))
	_, out := run(t, d, pkt{src: ap(client, 40000), dst: ap(vip, 53), proto: UDP, udpNoCsum: true, payload: []byte("q")}.bytes())
	p := parse(t, out)
	expect(t, "forward", p, ap(client, 40000), ap(backendA, 5353))
	if c := binary.BigEndian.Uint16(p.l4[6:]); c != 0 {
		t.Fatalf("UDP checksum %#x, want 0 (sender sent none)", c)
	}
}

func TestNodePortSNAT(t *testing.T) {
	c := testConstants()
	d := load(t, c)
	service(t, d, Frontend{nodeIP, 30080, TCP}, true, ap(backendA, 8080))

	ret, out := run(t, d, pkt{src: ap(extIP, 50000), dst: ap(nodeIP, 30080), proto: TCP, tcpFlags: 0x02}.bytes())
	if ret != actOK {
		t.Fatalf("verdict %d", int32(ret))
	}
	f := parse(t, out)
	if f.src != nodeIP || f.sport < c.SNATPortMin || f.sport > c.SNATPortMax {
		t.Fatalf("source %v:%d, want node address with a port in %d-%d", f.src, f.sport, c.SNATPortMin, c.SNATPortMax)
	}
	expect(t, "forward", f, ap(nodeIP, f.sport), ap(backendA, 8080))

	_, out = run(t, d, pkt{src: ap(backendA, 8080), dst: ap(nodeIP, f.sport), proto: TCP, tcpFlags: 0x12}.bytes())
	expect(t, "reply", parse(t, out), ap(nodeIP, 30080), ap(extIP, 50000))

	st, _ := d.Stats()
	if st.SNATAllocation != 1 || st.PortTries[0] != 1 {
		t.Fatalf("client port 50000 is free and in range, so try 1 should keep it: %+v", st)
	}
}

func TestHairpinSNATsToReservedAddress(t *testing.T) {
	d := load(t, testConstants())
	service(t, d, Frontend{vip, 80, TCP}, false, ap(backendA, 8080))

	_, out := run(t, d, pkt{src: ap(backendA, 41000), dst: ap(vip, 80), proto: TCP, tcpFlags: 0x02}.bytes())
	f := parse(t, out)
	expect(t, "forward", f, ap(hairpin, f.sport), ap(backendA, 8080))

	_, out = run(t, d, pkt{src: ap(backendA, 8080), dst: ap(hairpin, f.sport), proto: TCP, tcpFlags: 0x12}.bytes())
	expect(t, "reply", parse(t, out), ap(vip, 80), ap(backendA, 41000))
}

func TestSamePortToTwoFrontendsOfOneBackend(t *testing.T) {
	// Two services share a backend; one client port reaching both would give
	// two connections the same reply tuple. The second must be port-translated.
	d := load(t, testConstants())
	service(t, d, Frontend{vip, 80, TCP}, false, ap(backendA, 8080))
	service(t, d, Frontend{vip.Next(), 80, TCP}, false, ap(backendA, 8080))
	_, out := run(t, d, pkt{src: ap(client, 40000), dst: ap(vip, 80), proto: TCP, tcpFlags: 0x02}.bytes())
	expect(t, "first", parse(t, out), ap(client, 40000), ap(backendA, 8080))
	_, out = run(t, d, pkt{src: ap(client, 40000), dst: ap(vip.Next(), 80), proto: TCP, tcpFlags: 0x02}.bytes())
	p := parse(t, out)
	if p.sport == 40000 {
		t.Fatal("second connection kept the colliding source port")
	}
	expect(t, "second", p, ap(client, p.sport), ap(backendA, 8080))
	_, out = run(t, d, pkt{src: ap(backendA, 8080), dst: ap(client, p.sport), proto: TCP, tcpFlags: 0x12}.bytes())
	expect(t, "second reply", parse(t, out), ap(vip.Next(), 80), ap(client, 40000))
}

// icmpFlow runs f as a subtest for a UDP flow from a client to a ClusterIP
// and from outside to a NodePort, on addresses of one family: the
// datapath d has the frontend fe served by backend be:5353.
func icmpFlow(t *testing.T, c Constants, cl, clusterIP, ext, node, be netip.Addr, f func(t *testing.T, d *Datapath, src netip.AddrPort, fe Frontend)) {
	for _, snat := range []bool{false, true} {
		t.Run(map[bool]string{false: "ClusterIP", true: "NodePort"}[snat], func(t *testing.T) {
			d := load(t, c)
			src, fe := ap(cl, 40000), Frontend{clusterIP, 53, UDP}
			if snat {
				src, fe = ap(ext, 50000), Frontend{node, 30053, UDP}
			}
			service(t, d, fe, snat, ap(be, 5353))
			f(t, d, src, fe)
		})
	}
}

func TestICMPErrorReverseTranslated(t *testing.T) {
	icmpFlow(t, testConstants(), client, vip, extIP, nodeIP, backendA, func(t *testing.T, d *Datapath, src netip.AddrPort, fe Frontend) {
		_, out := run(t, d, pkt{src: src, dst: ap(fe.Addr, fe.Port), proto: UDP, payload: []byte("query")}.bytes())
		sent := parse(t, out)

		// The backend answers with port unreachable, quoting what it got.
		ret, out := run(t, d, icmpError(backendA, sent.src, 3, 3, out))
		if ret != actOK {
			t.Fatalf("verdict %d", int32(ret))
		}
		e := parse(t, out)
		if e.src != fe.Addr || e.dst != src.Addr() || !e.ipOK || !e.l4OK {
			t.Fatalf("outer %v -> %v (ip ok %v, icmp ok %v), want %v -> %v", e.src, e.dst, e.ipOK, e.l4OK, fe.Addr, src.Addr())
		}
		q := e.l4[8:]
		qs, qd := netip.AddrFrom4([4]byte(q[12:16])), netip.AddrFrom4([4]byte(q[16:20]))
		qsp, qdp := binary.BigEndian.Uint16(q[20:]), binary.BigEndian.Uint16(q[22:])
		if ap(qs, qsp) != src || ap(qd, qdp) != ap(fe.Addr, fe.Port) {
			t.Fatalf("quoted %v:%d -> %v:%d, want %v -> %v", qs, qsp, qd, qdp, src, ap(fe.Addr, fe.Port))
		}
		if csumFold(csumAdd(0, q[:20])) != 0 {
			t.Fatal("quoted IP header checksum invalid")
		}
		if st, _ := d.Stats(); st.ICMPTranslated != 1 {
			t.Fatalf("icmp_translated = %d", st.ICMPTranslated)
		}
	})
}

func TestFragmentsFollowFirstFragment(t *testing.T) {
	d := load(t, testConstants())
	service(t, d, Frontend{vip, 53, UDP}, false, ap(backendA, 5353))
	first := pkt{src: ap(client, 40000), dst: ap(vip, 53), proto: UDP, id: 77, moreFrags: true, payload: make([]byte, 16)}
	_, out := run(t, d, first.bytes())
	p := parse(t, out)
	if p.dst != backendA || p.dport != 5353 || !p.ipOK {
		t.Fatalf("first fragment -> %v:%d (ip ok %v)", p.dst, p.dport, p.ipOK)
	}
	later := pkt{src: ap(client, 0), dst: ap(vip, 0), proto: UDP, id: 77, fragOffset: 3, noL4: true, payload: []byte("tail of datagram")}
	ret, out := run(t, d, later.bytes())
	p = parse(t, out)
	if ret != actOK || p.dst != backendA || p.src != client || !p.ipOK {
		t.Fatalf("later fragment: verdict %d, %v -> %v (ip ok %v)", int32(ret), p.src, p.dst, p.ipOK)
	}
	// A later fragment of a datagram we never saw is not ours to judge.
	later.id = 78
	if ret, _ := run(t, d, later.bytes()); ret != actUnspc {
		t.Fatalf("unknown fragment verdict %d, want TC_ACT_UNSPEC", int32(ret))
	}
	if st, _ := d.Stats(); st.FragTranslated != 1 {
		t.Fatalf("frag_translated = %d", st.FragTranslated)
	}
}

func TestRemovedBackendRebalances(t *testing.T) {
	d := load(t, testConstants())
	fe := Frontend{vip, 80, UDP}
	if err := d.PutBackend(1, ap(backendA, 8080)); err != nil {
		t.Fatal(err)
	}
	if err := d.PutService(fe, ServiceEntry{ID: 7, Slots: []uint32{1}}, ServiceEntry{}); err != nil {
		t.Fatal(err)
	}
	in := pkt{src: ap(client, 40000), dst: ap(vip, 80), proto: UDP, payload: []byte("x")}.bytes()
	_, out := run(t, d, in)
	if p := parse(t, out); p.dst != backendA {
		t.Fatalf("went to %v", p.dst)
	}
	// Replace A by B; the existing session must move on its next packet.
	if err := d.PutBackend(2, ap(backendB, 8080)); err != nil {
		t.Fatal(err)
	}
	if err := d.PutService(fe, ServiceEntry{ID: 7, Slots: []uint32{2}}, ServiceEntry{ID: 7, Slots: []uint32{1}}); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteBackend(1); err != nil {
		t.Fatal(err)
	}
	_, out = run(t, d, in)
	if p := parse(t, out); p.dst != backendB {
		t.Fatalf("after removal went to %v, want %v", p.dst, backendB)
	}
	ss, _ := d.Sessions()
	if len(ss) != 2 {
		t.Fatalf("%d entries after re-balance, want exactly the new pair", len(ss))
	}
	if st, _ := d.Stats(); st.StaleBackend != 1 {
		t.Fatalf("stale_backend = %d", st.StaleBackend)
	}
	// No backends left: new flows are dropped and counted.
	if err := d.PutService(fe, ServiceEntry{ID: 7}, ServiceEntry{ID: 7, Slots: []uint32{2}}); err != nil {
		t.Fatal(err)
	}
	ret, _ := run(t, d, pkt{src: ap(client, 40001), dst: ap(vip, 80), proto: UDP}.bytes())
	if st, _ := d.Stats(); ret != actShot || st.Drops["no_backend"] != 1 {
		t.Fatalf("verdict %d, drops %v", int32(ret), st.Drops)
	}
}

func TestRemovedBackendTCPDrains(t *testing.T) {
	d := load(t, testConstants())
	fe := Frontend{vip, 80, TCP}
	d.PutBackend(1, ap(backendA, 8080))
	d.PutBackend(2, ap(backendB, 8080))
	d.PutService(fe, ServiceEntry{ID: 7, Slots: []uint32{1}}, ServiceEntry{})
	syn := pkt{src: ap(client, 40000), dst: ap(vip, 80), proto: TCP, tcpFlags: 0x02}
	run(t, d, syn.bytes())
	d.PutService(fe, ServiceEntry{ID: 7, Slots: []uint32{2}}, ServiceEntry{ID: 7, Slots: []uint32{1}})
	d.DeleteBackend(1)
	ack := syn
	ack.tcpFlags = 0x10
	if _, out := run(t, d, ack.bytes()); parse(t, out).dst != backendA {
		t.Fatal("established connection moved off its removed backend; it should drain there")
	}
	syn.src = ap(client, 40001)
	if _, out := run(t, d, syn.bytes()); parse(t, out).dst != backendB {
		t.Fatal("new connection did not go to the remaining backend")
	}
}

func TestTCPReuseAfterClose(t *testing.T) {
	d := load(t, testConstants())
	service(t, d, Frontend{vip, 80, TCP}, false, ap(backendA, 8080))
	syn := pkt{src: ap(client, 40000), dst: ap(vip, 80), proto: TCP, tcpFlags: 0x02}
	run(t, d, syn.bytes())
	fin := syn
	fin.tcpFlags = 0x11
	run(t, d, fin.bytes())
	run(t, d, syn.bytes()) // same tuple, new connection
	if st, _ := d.Stats(); st.SessionsCreated != 2 {
		t.Fatalf("sessions_created = %d, want 2 (SYN after FIN opens a new session)", st.SessionsCreated)
	}
}

// A closed connection's SNAT port goes to the next connection that picks it
// once the old one has been quiet for 2 s (CLOSED_REUSE_NS), and not before;
// an orphan reply entry (no forward entry) as old goes the same way.
func TestClosedPortReclaimed(t *testing.T) {
	c := testConstants()
	c.SNATPortMin, c.SNATPortMax = 40000, 40000 // one port: every allocation lands on it
	d := load(t, c)
	be := ap(backendA, 8080)
	service(t, d, Frontend{nodeIP, 30080, TCP}, true, be)
	connect := func(cport uint16) bool {
		t.Helper()
		ret, _ := run(t, d, pkt{src: ap(extIP, cport), dst: ap(nodeIP, 30080), proto: TCP, tcpFlags: 0x02}.bytes())
		return ret == actOK
	}
	age := func() { // every entry quiet for 3 s
		t.Helper()
		ss, err := d.Sessions()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range ss {
			s.LastSeen = Monotonic() - 3*time.Second
			if err := d.PutSession(s); err != nil {
				t.Fatal(err)
			}
		}
	}
	replyKey := Flow{Src: be, Dst: ap(nodeIP, 40000), Proto: TCP}
	owner := func() netip.AddrPort {
		t.Helper()
		ss, _ := d.Sessions()
		for _, s := range ss {
			if s.Key == replyKey {
				return s.To.Dst
			}
		}
		return netip.AddrPort{}
	}

	if !connect(50000) || owner() != ap(extIP, 50000) {
		t.Fatalf("first connection did not get port 40000 (owner %v)", owner())
	}
	if connect(50001) {
		t.Fatal("a second connection got the port of an open one")
	}
	age()
	if connect(50001) {
		t.Fatal("an open (not closed) connection's port was taken because it was quiet")
	}
	// The client closes: FIN through the forward entry.
	run(t, d, pkt{src: ap(extIP, 50000), dst: ap(nodeIP, 30080), proto: TCP, tcpFlags: 0x11}.bytes())
	if connect(50001) {
		t.Fatal("a connection closed just now gave its port away")
	}
	age()
	if !connect(50001) || owner() != ap(extIP, 50001) {
		t.Fatalf("the closed, quiet connection's port was not reclaimed (owner %v)", owner())
	}
	ss, _ := d.Sessions()
	for _, s := range ss {
		if s.Key.Src == ap(extIP, 50000) {
			t.Errorf("the reclaimed connection's forward entry is still there: %+v", s)
		}
	}
	// An orphan reply entry: its forward entry gone (LRU eviction).
	if err := d.DeleteSession(Flow{Src: ap(extIP, 50001), Dst: ap(nodeIP, 30080), Proto: TCP}); err != nil {
		t.Fatal(err)
	}
	if connect(50002) {
		t.Fatal("a fresh orphan's port was taken")
	}
	age()
	if !connect(50002) || owner() != ap(extIP, 50002) {
		t.Fatalf("an old orphan's port was not reclaimed (owner %v)", owner())
	}
	if st, _ := d.Stats(); st.Drops["no_port"] != 4 {
		t.Errorf("no_port drops %d, want 4 (one per refused connection)", st.Drops["no_port"])
	}
}

func TestConstantsValidate(t *testing.T) {
	c := testConstants()
	c.SNATPortMin, c.SNATPortMax = 30000, 40000
	if err := c.Validate(); err == nil {
		t.Fatal("overlapping SNAT and NodePort ranges accepted")
	}
}

// fillReplyPorts occupies frac of the SNAT range for replies from backend to
// the node address, as other connections would.
func fillReplyPorts(t *testing.T, d *Datapath, c Constants, be netip.AddrPort, frac float64, rng *rand.Rand) {
	t.Helper()
	span := int(c.SNATPortMax-c.SNATPortMin) + 1
	// Seen "in the future": these stand for live connections, and a reply
	// entry without its forward one is reclaimed once it has been quiet for
	// CLOSED_REUSE_NS (2 s) — which a slow run of TestPortAllocationUnderPressure
	// outlasted, so fewer ports were taken than the fill level says and the
	// failure rate came out below the expected one.
	seen := Monotonic() + time.Hour
	for _, i := range rng.Perm(span)[:int(frac*float64(span))] {
		port := c.SNATPortMin + uint16(i)
		err := d.PutSession(Session{
			Key:   Flow{Src: be, Dst: ap(nodeIP, port), Proto: TCP},
			To:    Flow{Src: ap(nodeIP, 30080), Dst: ap(extIP, 1), Proto: TCP},
			Reply: true, SNAT: true, LastSeen: seen,
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestPortExhaustion(t *testing.T) {
	c := testConstants()
	c.SNATPortMin, c.SNATPortMax = 40000, 40015
	d := load(t, c)
	service(t, d, Frontend{nodeIP, 30080, TCP}, true, ap(backendA, 8080))
	fillReplyPorts(t, d, c, ap(backendA, 8080), 1, rand.New(rand.NewPCG(1, 2)))
	ret, _ := run(t, d, pkt{src: ap(extIP, 40001), dst: ap(nodeIP, 30080), proto: TCP, tcpFlags: 0x02}.bytes())
	st, _ := d.Stats()
	if ret != actShot || st.Drops["no_port"] != 1 || st.PortFailures != 1 {
		t.Fatalf("verdict %d, no_port %d, failures %d: a full range must drop after %d tries",
			int32(ret), st.Drops["no_port"], st.PortFailures, SNATTries)
	}
	if ss, _ := d.Sessions(); len(ss) != 16 {
		t.Fatalf("%d entries: a failed allocation must leave none behind", len(ss))
	}
}

// TestPortAllocationUnderPressure fills 70 %, 75 % and 100 % of the range and
// checks the failure rate against what SNATTries independent tries give,
// fill^SNATTries, within five standard deviations.
func TestPortAllocationUnderPressure(t *testing.T) {
	const attempts = 2000
	c := testConstants()
	c.SNATPortMin, c.SNATPortMax = 40000, 49999 // 10,000 ports
	for _, fill := range []float64{0.70, 0.75, 1.0} {
		d := load(t, c)
		be := ap(backendA, 8080)
		service(t, d, Frontend{nodeIP, 30080, TCP}, true, be)
		rng := rand.New(rand.NewPCG(uint64(fill*100), 3))
		fillReplyPorts(t, d, c, be, fill, rng)

		fails := 0
		for i := range attempts {
			// Clients' own ports fall in the range too, so try 1 is as
			// likely to collide as a random pick.
			cport := c.SNATPortMin + uint16(rng.IntN(int(c.SNATPortMax-c.SNATPortMin)+1))
			src := ap(netip.AddrFrom4([4]byte{198, 18, 1 + byte(i>>8), byte(i)}), cport)
			ret, out := run(t, d, pkt{src: src, dst: ap(nodeIP, 30080), proto: TCP, tcpFlags: 0x02}.bytes())
			if ret == actShot {
				fails++
				continue
			}
			p := parse(t, out)
			if p.sport < c.SNATPortMin || p.sport > c.SNATPortMax || (p.sport >= c.NodePortMin && p.sport <= c.NodePortMax) {
				t.Fatalf("allocated port %d outside the SNAT range or inside the NodePort range", p.sport)
			}
			// Release it so the fill level stays where we set it.
			d.DeleteSession(Flow{Src: src, Dst: ap(nodeIP, 30080), Proto: TCP})
			d.DeleteSession(Flow{Src: be, Dst: ap(nodeIP, p.sport), Proto: TCP})
		}
		st, _ := d.Stats()
		rate := float64(fails) / attempts
		want := math.Pow(fill, SNATTries)
		sigma := math.Sqrt(want * (1 - want) / attempts)
		var tries, ok uint64
		for i, n := range st.PortTries {
			tries += uint64(i+1) * n
			ok += n
		}
		t.Logf("fill %3.0f%%: failures %5.1f%% (expected %5.1f%%), tries histogram %v + %d failed, mean tries per success %.2f",
			fill*100, rate*100, want*100, st.PortTries, st.PortFailures, float64(tries)/float64(max(ok, 1)))
		if math.Abs(rate-want) > 5*sigma+0.005 {
			t.Errorf("fill %.0f%%: failure rate %.3f, want %.3f ± %.3f", fill*100, rate, want, 5*sigma)
		}
		if st.PortFailures != uint64(fails) || ok+st.PortFailures != attempts {
			t.Errorf("histogram %v + %d does not account for %d attempts", st.PortTries, st.PortFailures, attempts)
		}
		d.Close()
	}
}

// last_seen is written only once it lags by LastSeenGrain: a packet within
// the grain leaves the entry untouched, one after it refreshes it.
func TestLastSeenWrittenWhenStale(t *testing.T) {
	d := load(t, testConstants())
	fe := Frontend{vip, 80, TCP}
	service(t, d, fe, false, ap(backendA, 8080))
	syn := pkt{src: ap(client, 40000), dst: ap(vip, 80), proto: TCP, tcpFlags: 0x02}
	run(t, d, syn.bytes())
	key := lbFlow{Saddr: addrBE(client), Daddr: addrBE(vip), Sport: portBE(40000), Dport: portBE(80), Proto: 6}
	var v lbSession
	if err := d.objs.Sessions.Lookup(key, &v); err != nil {
		t.Fatal(err)
	}
	created := v.LastSeen
	ack := syn
	ack.tcpFlags = 0x10
	run(t, d, ack.bytes())
	if err := d.objs.Sessions.Lookup(key, &v); err != nil || v.LastSeen != created {
		t.Fatalf("last_seen %d after a packet within the grain, want it left at %d (err %v)", v.LastSeen, created, err)
	}
	v.LastSeen -= uint64(2 * LastSeenGrain)
	if err := d.objs.Sessions.Put(key, v); err != nil {
		t.Fatal(err)
	}
	before := uint64(Monotonic())
	run(t, d, ack.bytes())
	if err := d.objs.Sessions.Lookup(key, &v); err != nil || v.LastSeen < before {
		t.Fatalf("last_seen %d after a packet with the entry 2 grains stale, want >= %d (err %v)", v.LastSeen, before, err)
	}
}
