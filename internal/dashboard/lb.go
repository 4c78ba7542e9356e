// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/swiftlane/swiftlane/internal/lb/labnet"
)

// LB is `swiftlane lb` in a netns topology (internal/lb/labnet) with one
// backend behind a ClusterIP Service that has carried TCP and UDP
// connections, its /metrics reachable from the caller's namespace.
type LB struct {
	MetricsAddr string
	topo        *labnet.Topology
	proc        *labnet.LB
	echo        *labnet.Echo
	link, dir   string
}

// StartLB builds the topology, starts bin's load balancer in its node
// namespace and sends a TCP connection and a UDP datagram through the
// Service. The load balancer's metrics listen on a veth pair from the node
// namespace to the caller's (the only link out of the topology). Needs root.
func StartLB(bin string) (lb *LB, err error) {
	topo, err := labnet.New(1)
	if err != nil {
		return nil, err
	}
	lb = &LB{topo: topo}
	defer func() {
		if err != nil {
			lb.Stop()
			lb = nil
		}
	}()
	if lb.echo, err = labnet.StartEcho(topo.Backends[0], "b0", 8080); err != nil {
		return lb, err
	}
	// A /30 of TEST-NET-2 per process, so parallel runs do not clash.
	base := netip.AddrFrom4([4]byte{198, 51, 100, byte(os.Getpid() % 64 * 4)})
	here, there := base.Next(), base.Next().Next()
	lb.link = fmt.Sprintf("swldash%d", os.Getpid()%100000)
	lb.MetricsAddr = there.String() + ":9465"
	for _, argv := range [][]string{
		{"ip", "link", "add", lb.link, "type", "veth", "peer", "name", "dash0", "netns", topo.Node.Name},
		{"ip", "addr", "add", here.String() + "/30", "dev", lb.link},
		{"ip", "link", "set", lb.link, "up"},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return lb, fmt.Errorf("%v: %w: %s", argv, err, out)
		}
	}
	if _, err = topo.Node.Run("ip", "addr", "add", there.String()+"/30", "dev", "dash0"); err != nil {
		return lb, err
	}
	if _, err = topo.Node.Run("ip", "link", "set", "dash0", "up"); err != nil {
		return lb, err
	}
	if lb.dir, err = os.MkdirTemp("", "swiftlane-dash-lb-"); err != nil {
		return lb, err
	}
	cfg := filepath.Join(lb.dir, "services.yaml")
	services := fmt.Sprintf(`nodeAddresses: [%s]
interfaces: [ext0, "v*"]
services:
  - name: web
    clusterIP: 10.96.0.10
    ports:
      - {name: http, port: 80, targetPort: 8080}
      - {name: dns, protocol: UDP, port: 53, targetPort: 8080}
    endpoints: [{address: %s}]
`, topo.NodeIP, topo.BackendIPs[0])
	if err = os.WriteFile(cfg, []byte(services), 0o600); err != nil {
		return lb, err
	}
	lb.proc, err = labnet.StartLB(topo.Node, bin, 2*time.Minute, "--config", cfg, "--pin-dir", "",
		"--metrics-addr", lb.MetricsAddr, "--sweep-interval", "1s")
	if err != nil {
		return lb, err
	}
	for _, network := range []string{"tcp", "udp"} {
		if err = lb.through(network); err != nil {
			return lb, err
		}
	}
	return lb, nil
}

// through sends one request to the Service over network and checks that
// the backend answered.
func (lb *LB) through(network string) error {
	port := "80"
	if network == "udp" {
		port = "53"
	}
	c, err := lb.topo.Client.Dial(network, "10.96.0.10:"+port, 5*time.Second)
	if err != nil {
		return fmt.Errorf("through the load balancer (%s): %w", network, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if network == "udp" {
		if _, err := c.Write([]byte("hello\n")); err != nil {
			return err
		}
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("through the load balancer (%s): no answer from the backend: %w\n%s", network, err, lb.proc.Log())
	}
	if name, _, err := labnet.ParseEcho(line); err != nil || name != "b0" {
		return fmt.Errorf("through the load balancer (%s): answer %q", network, line)
	}
	return nil
}

// Log is the load balancer's output so far.
func (lb *LB) Log() string {
	if lb.proc == nil {
		return ""
	}
	return lb.proc.Log()
}

// Stop ends the load balancer and removes the topology (the veth pair goes
// with the node namespace).
func (lb *LB) Stop() error {
	if lb.proc != nil {
		lb.proc.Stop(10 * time.Second)
	}
	if lb.echo != nil {
		lb.echo.Close()
	}
	if lb.dir != "" {
		os.RemoveAll(lb.dir)
	}
	return lb.topo.Close()
}
