// SPDX-License-Identifier: Apache-2.0

// Package kubetest runs a real Kubernetes control plane, etcd plus
// kube-apiserver as built by lab/k8s.sh, for tests (Start), and for VM test
// drivers and benchmarks that live outside package testing (Run).
//
// By default there is no kubelet, controller-manager or scheduler: objects
// are stored, validated, admitted and watched as on a real cluster, but pods
// stay Pending and new namespaces get no "default" ServiceAccount (create one
// before creating pods there, or the ServiceAccount admission rejects them).
// Options.Controllers adds kube-controller-manager and kube-scheduler, for a
// cluster whose nodes are kubelets joining from elsewhere (test/vm's
// TestCluster: a lab VM guest).
package kubetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// EnvBinDir names the environment variable with the directory holding
// etcd, kube-apiserver, kubectl and helm: SWL_K8S_BIN=$(bash lab/k8s.sh).
const EnvBinDir = "SWL_K8S_BIN"

// GuestHost is the host's loopback as a lab/vm.sh --net guest sees it (QEMU
// user-mode networking). Put it in Options.ExtraIPs and give the guest a
// kubeconfig from WriteKubeconfig(path, s.URLFor(GuestHost)).
const GuestHost = "10.0.2.2"

// Options configure Run. The zero value is usable when EnvBinDir is set.
type Options struct {
	// BinDir holds the binaries; empty means $SWL_K8S_BIN.
	BinDir string
	// ExtraIPs are added to the serving certificate's IP SANs, for clients
	// that reach the loopback-bound server through another address.
	ExtraIPs []net.IP
	// ServiceCIDR is --service-cluster-ip-range; default 10.96.0.0/12.
	ServiceCIDR string
	// APIServerArgs are appended to kube-apiserver's flags (a repeated flag
	// overrides an earlier one), e.g. --feature-gates=....
	APIServerArgs []string
	// Controllers also starts kube-controller-manager and kube-scheduler
	// (from BinDir), so that pods are scheduled onto kubelets that join,
	// namespaces get their "default" ServiceAccount and kube-root-ca.crt,
	// and Deployments and DaemonSets are rolled out.
	Controllers bool
	// StartTimeout bounds the whole startup; default 2 min (4 with
	// Controllers).
	StartTimeout time.Duration
}

// Server is a running etcd + kube-apiserver pair on loopback ports.
type Server struct {
	// ServerURL is https://127.0.0.1:Port.
	ServerURL string
	Port      int
	// Token authenticates as kubetest-admin in group system:masters.
	Token string
	// CACert (PEM) signed the serving certificate.
	CACert []byte
	// Dir holds the data, key material, kubeconfig and logs.
	Dir    string
	BinDir string
	// EtcdLog and APIServerLog are the processes' output files; with
	// Options.Controllers, ControllerManagerLog and SchedulerLog too.
	EtcdLog, APIServerLog              string
	ControllerManagerLog, SchedulerLog string

	kubeconfig string
	procs      []*Proc // in start order

	stopOnce sync.Once
	stopErr  error
}

// Run starts etcd and kube-apiserver with their state in dir (which must
// exist and is left in place) and returns once /readyz answers ok and the
// "default" namespace exists. ctx bounds the startup only: the processes
// run until Stop. On error nothing is left running.
func Run(ctx context.Context, dir string, opts Options) (_ *Server, err error) {
	if opts.BinDir == "" {
		opts.BinDir = os.Getenv(EnvBinDir)
	}
	if opts.BinDir == "" {
		return nil, fmt.Errorf("no binaries: set Options.BinDir or %s=$(bash lab/k8s.sh)", EnvBinDir)
	}
	bins := []string{"etcd", "kube-apiserver", "kubectl"}
	if opts.Controllers {
		bins = append(bins, "kube-controller-manager", "kube-scheduler")
	}
	for _, name := range bins {
		if fi, err := os.Stat(filepath.Join(opts.BinDir, name)); err != nil || fi.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("%s is not an executable in %s (%s / Options.BinDir): build it with `bash lab/k8s.sh`",
				name, opts.BinDir, EnvBinDir)
		}
	}
	if opts.ServiceCIDR == "" {
		opts.ServiceCIDR = "10.96.0.0/12"
	}
	cidr, err := netip.ParsePrefix(opts.ServiceCIDR)
	if err != nil {
		return nil, fmt.Errorf("Options.ServiceCIDR: %w", err)
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 2 * time.Minute
		if opts.Controllers {
			opts.StartTimeout = 4 * time.Minute
		}
	}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()

	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	s := &Server{
		Dir:          dir,
		BinDir:       opts.BinDir,
		EtcdLog:      filepath.Join(dir, "etcd.log"),
		APIServerLog: filepath.Join(dir, "kube-apiserver.log"),
		kubeconfig:   filepath.Join(dir, "kubeconfig"),
	}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()

	pki, err := newPKI(filepath.Join(dir, "pki"), cidr, opts.ExtraIPs)
	if err != nil {
		return nil, fmt.Errorf("key material: %w", err)
	}
	s.CACert = pki.caPEM
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	s.Token = hex.EncodeToString(tok)
	tokens := filepath.Join(dir, "tokens.csv") // token,user,uid,"groups"
	if err := os.WriteFile(tokens, []byte(s.Token+",kubetest-admin,kubetest-admin,\"system:masters\"\n"), 0o600); err != nil {
		return nil, err
	}

	etcdURL := ""
	err = s.startOnFreePorts(ctx, "etcd", s.EtcdLog, 2, func(p []int) []string {
		client, peer := loopURL("http", p[0]), loopURL("http", p[1])
		return []string{
			"--name=kubetest", "--data-dir=" + filepath.Join(dir, "etcd"),
			"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
			"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
			"--initial-cluster=kubetest=" + peer,
			// The data is thrown away with the test.
			"--unsafe-no-fsync",
		}
	}, func(ctx context.Context, p []int) error {
		etcdURL = loopURL("http", p[0])
		return etcdHealthy(ctx, etcdURL)
	})
	if err != nil {
		return nil, err
	}

	hc := s.apiClient()
	defer hc.CloseIdleConnections()
	err = s.startOnFreePorts(ctx, "kube-apiserver", s.APIServerLog, 1, func(p []int) []string {
		return append([]string{
			"--etcd-servers=" + etcdURL,
			"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(p[0]),
			"--cert-dir=" + filepath.Join(dir, "pki"), // never the default /var/run/kubernetes
			"--tls-cert-file=" + pki.serverCert, "--tls-private-key-file=" + pki.serverKey,
			"--client-ca-file=" + pki.caCert,
			"--kubelet-client-certificate=" + pki.kubeletClientCert, "--kubelet-client-key=" + pki.kubeletClientKey,
			"--token-auth-file=" + tokens,
			"--authorization-mode=Node,RBAC",
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + pki.saPub,
			"--service-account-signing-key-file=" + pki.saKey,
			"--service-cluster-ip-range=" + opts.ServiceCIDR,
			// DaemonSets of node agents run privileged.
			"--allow-privileged=true",
			// 127.0.0.1 is not a valid endpoint for the "kubernetes"
			// Service, and nothing here routes to it.
			"--endpoint-reconciler-type=none",
			"--profiling=false",
		}, opts.APIServerArgs...)
	}, func(ctx context.Context, p []int) error {
		url := loopURL("https", p[0])
		// /readyz covers etcd, the RBAC bootstrap policy and the other
		// post-start hooks; "default" comes from a controller started by
		// one of them, and tests create objects there straight away.
		for _, path := range []string{"/readyz", "/api/v1/namespaces/default"} {
			if err := get(ctx, hc, url+path, s.Token); err != nil {
				return err
			}
		}
		s.ServerURL, s.Port = url, p[0]
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := s.WriteKubeconfig(s.kubeconfig, s.ServerURL); err != nil {
		return nil, err
	}
	if opts.Controllers {
		if err := s.startControllers(ctx, pki); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// startControllers runs kube-controller-manager and kube-scheduler as the
// admin, each serving only its health endpoints on a loopback port.
func (s *Server) startControllers(ctx context.Context, pki *pki) error {
	s.ControllerManagerLog = filepath.Join(s.Dir, "kube-controller-manager.log")
	s.SchedulerLog = filepath.Join(s.Dir, "kube-scheduler.log")
	// Their serving certificates are self-signed (in --cert-dir); only
	// liveness is read from them.
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer hc.CloseIdleConnections()
	healthy := func(ctx context.Context, p []int) error {
		return get(ctx, hc, loopURL("https", p[0])+"/healthz", "")
	}
	common := func(name string, port int) []string {
		return []string{
			"--kubeconfig=" + s.kubeconfig,
			"--authentication-kubeconfig=" + s.kubeconfig,
			"--authorization-kubeconfig=" + s.kubeconfig,
			"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + filepath.Join(s.Dir, name),
			"--leader-elect=false",
			"--profiling=false",
		}
	}
	err := s.startOnFreePorts(ctx, "kube-controller-manager", s.ControllerManagerLog, 1, func(p []int) []string {
		return append(common("kube-controller-manager", p[0]),
			// Signs the ServiceAccount tokens the token controller makes,
			// and is published as kube-root-ca.crt in every namespace
			// (pods' projected service account volumes need it).
			"--service-account-private-key-file="+pki.saKey,
			"--root-ca-file="+pki.caCert,
			"--use-service-account-credentials=true",
		)
	}, healthy)
	if err != nil {
		return err
	}
	// Namespaces exist before the controllers: wait for what pods in
	// "default" need, so a test can create one straight away.
	api := s.apiClient()
	defer api.CloseIdleConnections()
	err = s.procs[len(s.procs)-1].waitReady(ctx, func(ctx context.Context) error {
		for _, path := range []string{"/api/v1/namespaces/default/serviceaccounts/default", "/api/v1/namespaces/default/configmaps/kube-root-ca.crt"} {
			if err := get(ctx, api, s.ServerURL+path, s.Token); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w\n=== %s (last 40 lines)\n%s", err, s.ControllerManagerLog, Tail(s.ControllerManagerLog, 40))
	}
	return s.startOnFreePorts(ctx, "kube-scheduler", s.SchedulerLog, 1, func(p []int) []string {
		return common("kube-scheduler", p[0])
	}, healthy)
}

// apiClient trusts the server's CA, for readiness checks.
func (s *Server) apiClient() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.CACert)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// RESTConfig is a fresh admin client configuration, without client-side rate
// limiting (client-go's default of 5 QPS slows tests down).
func (s *Server) RESTConfig() *rest.Config {
	return &rest.Config{
		Host:            s.ServerURL,
		BearerToken:     s.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.CACert},
		QPS:             -1,
	}
}

// Kubeconfig is the path of an admin kubeconfig for ServerURL.
func (s *Server) Kubeconfig() string { return s.kubeconfig }

// URLFor is the server's URL as reached through host (an IP in
// Options.ExtraIPs or a name in the certificate), e.g. URLFor(GuestHost).
func (s *Server) URLFor(host string) string {
	return "https://" + net.JoinHostPort(host, strconv.Itoa(s.Port))
}

// WriteKubeconfig writes an admin kubeconfig (mode 0600) for serverURL,
// for a client that reaches the server by another address, e.g. a VM guest.
func (s *Server) WriteKubeconfig(path, serverURL string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: serverURL, CertificateAuthorityData: s.CACert}
	cfg.AuthInfos["kubetest-admin"] = &clientcmdapi.AuthInfo{Token: s.Token}
	cfg.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "kubetest-admin"}
	cfg.CurrentContext = "kubetest"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return nil
}

// Command prepares one of the built tools (kubectl, helm) to run against
// the server as admin: KUBECONFIG points at Kubeconfig(), and kubectl's and
// helm's caches live in Dir, not in $HOME.
func (s *Server) Command(ctx context.Context, tool string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(s.BinDir, tool), args...)
	cache := filepath.Join(s.Dir, "client-cache")
	// Later entries win over the caller's environment (exec keeps the last).
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+s.kubeconfig,
		"KUBECACHEDIR="+filepath.Join(cache, "kube"),
		"HELM_CACHE_HOME="+filepath.Join(cache, "helm"),
		"HELM_CONFIG_HOME="+filepath.Join(cache, "helm-config"),
		"HELM_DATA_HOME="+filepath.Join(cache, "helm-data"),
	)
	return cmd
}

// Stop terminates kube-apiserver, then etcd (SIGTERM, SIGKILL after 10 s).
// It reports a process that had already exited on its own. Idempotent.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		var errs []error
		for i := len(s.procs) - 1; i >= 0; i-- {
			errs = append(errs, s.procs[i].Stop(10*time.Second))
		}
		s.stopErr = errors.Join(errs...)
	})
	return s.stopErr
}

// Logs is the tail (up to lines lines each) of the processes' output, for
// a failure report.
func (s *Server) Logs(lines int) string {
	var b strings.Builder
	for _, f := range []string{s.EtcdLog, s.APIServerLog, s.ControllerManagerLog, s.SchedulerLog} {
		if f == "" {
			continue
		}
		fmt.Fprintf(&b, "=== %s (last %d lines)\n%s\n", f, lines, Tail(f, lines))
	}
	return b.String()
}

// startOnFreePorts starts a server on nports fresh loopback ports and waits
// until ready passes. A port is free when probed but another process can
// take it before the server binds; that case is retried with new ports.
func (s *Server) startOnFreePorts(ctx context.Context, name, logPath string, nports int,
	args func([]int) []string, ready func(context.Context, []int) error) error {
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(nports)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		p, err := StartProc(name, filepath.Join(s.BinDir, name), args(ports), nil, logPath)
		if err != nil {
			return err
		}
		err = p.waitReady(ctx, func(ctx context.Context) error { return ready(ctx, ports) })
		if err == nil {
			s.procs = append(s.procs, p)
			return nil
		}
		p.Stop(5 * time.Second)
		if attempt < 3 && strings.Contains(Tail(logPath, 50), "address already in use") {
			continue
		}
		return fmt.Errorf("%w\n=== %s (last 40 lines)\n%s", err, logPath, Tail(logPath, 40))
	}
}

// Proc is a server process started by StartProc.
type Proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited
	err  error         // its exit status, set before done closes
}

// StartProc starts bin with its output in logPath (created afresh) and env
// added to this process's environment. It dies with the caller, even on a
// test timeout's panic.
func StartProc(name, bin string, args, env []string, logPath string) (*Proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own descriptor
	cmd := exec.Command(bin, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = f, f
	// Die with the test binary (e.g. on a test timeout panic) instead of
	// holding ports and CPU after it is gone. Pdeathsig fires when the
	// forking *thread* exits, and Go may retire a thread at any time (tests
	// that enter network namespaces end theirs on purpose), so the child is
	// started from a goroutine locked to its thread until the child exits.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &Proc{name: name, cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return p, nil
}

// waitReady polls check until it passes, the process exits or ctx ends.
func (p *Proc) waitReady(ctx context.Context, check func(context.Context) error) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	for {
		last := check(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited during startup (%v)", p.name, p.err)
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s: %v", p.name, time.Since(start).Round(time.Second), last)
		case <-tick.C:
		}
	}
}

// Done is closed once the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Stop sends SIGTERM and, after grace, SIGKILL. It reports a process that
// had exited on its own, or had to be killed.
func (p *Proc) Stop(grace time.Duration) error {
	select {
	case <-p.done:
		return fmt.Errorf("%s had exited on its own (%v)", p.name, p.err)
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s ignored SIGTERM for %s and was killed", p.name, grace)
	}
	return nil
}

func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		// Held open until all are picked so the n ports differ.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("no free loopback port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func loopURL(scheme string, port int) string {
	return scheme + "://127.0.0.1:" + strconv.Itoa(port)
}

func etcdHealthy(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"health":"true"`)) {
		return fmt.Errorf("etcd /health: %s %s", resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

func get(ctx context.Context, hc *http.Client, url, token string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s %s", url, resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// Tail is the last n lines of a file ("" if unreadable), for failure
// reports; logs here are a few MB at most.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.SplitAfter(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}
