// SPDX-License-Identifier: Apache-2.0

package kubetest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// The cluster lab's API server runs on the host and its node in a VM
// guest, which the host reaches only through a QEMU port forward. The API
// server's "cluster" egress (kubelets for exec and logs, pods and Services
// for proxy) goes there: ForwardEgress on the host, ConnectProxy in the
// guest.

// ForwardEgress relays the API server's cluster egress to the HTTP CONNECT
// proxy at addr and returns the kube-apiserver flag that says so. The API
// server speaks HTTP CONNECT over TCP only with TLS client certificates,
// over a unix socket without: this serves the socket, in dir, until ctx
// ends.
func ForwardEgress(ctx context.Context, dir, addr string) (string, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", fmt.Errorf("egress proxy address %q: want HOST:PORT: %w", addr, err)
	}
	sock := filepath.Join(dir, "egress.sock")
	os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return "", err
	}
	context.AfterFunc(ctx, func() { l.Close() })
	go relay(l, addr)
	cfg := filepath.Join(dir, "egress-selector.yaml")
	yaml := fmt.Sprintf(`apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: %s
`, sock)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		return "", err
	}
	return "--egress-selector-config-file=" + cfg, nil
}

// ConnectProxy answers HTTP CONNECT by dialing the target from where it
// runs (the lab guest: the node, its pods, Service IPs).
var ConnectProxy http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		http.Error(w, "only CONNECT", http.StatusMethodNotAllowed)
		return
	}
	up, err := net.DialTimeout("tcp", r.Host, 10*time.Second)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer up.Close()
	c, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	splice(c, up, buf)
})

// relay pipes each connection accepted on l to addr until l is closed.
func relay(l net.Listener, addr string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			up, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				fmt.Fprintf(os.Stderr, "kubetest: relay to %s: %v\n", addr, err)
				return
			}
			defer up.Close()
			splice(c, up, c)
		}()
	}
}

// splice copies between c and up (c's bytes read from in) until up's side
// ends; the callers' closes then end the other copy.
func splice(c net.Conn, up net.Conn, in io.Reader) {
	go func() {
		io.Copy(up, in)
		if tc, ok := up.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}()
	io.Copy(c, up)
}
