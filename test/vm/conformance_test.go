// SPDX-License-Identifier: Apache-2.0
//go:build vmtest

package vm

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/swiftlane/swiftlane/internal/kubetest"
	"github.com/swiftlane/swiftlane/test/conformance"
)

// TestConformance runs Kubernetes' own sig-network conformance tests (the
// upstream e2e.test at the cluster's release, package conformance says
// which) against this one-node cluster, once per pass (make
// test-conformance, mk/conformance.mk). Each pass leaves e2e.test's JUnit
// report in SWL_CONFORMANCE_DIR/<column>/; the host turns them into
// bench/results/conformance.json. The test fails if e2e.test could not run
// the suite; a conformance test failing is a result, not a test failure.
//
// The tests exec into pods (kubectl exec: the API server calls the
// kubelet) and proxy to pods and Services through the API server, which
// runs on the host: its "cluster" egress comes here through QEMU's port
// forward (lab/vm.sh --hostfwd, kubetest serve -egress-forward) to the
// HTTP CONNECT proxy this test serves on SWL_CONFORMANCE_EGRESS.
func TestConformance(t *testing.T) {
	e2e, dir, egress := os.Getenv("SWL_CONFORMANCE_E2E"), os.Getenv("SWL_CONFORMANCE_DIR"), os.Getenv("SWL_CONFORMANCE_EGRESS")
	if e2e == "" || dir == "" || egress == "" {
		if os.Getenv("SWL_REQUIRE_CONFORMANCE") != "" {
			t.Fatal("SWL_CONFORMANCE_{E2E,DIR,EGRESS} are not all set: run this through `make test-conformance`")
		}
		t.Skip("no conformance suite: run `make test-conformance`")
	}
	ctx := runCtx(t, 8*time.Hour) // two passes of up to 4 h (e2e.test's --ginkgo.timeout)
	n := clusterNode(t, ctx)
	if n.env.dns != "" {
		n.deployCoreDNS(t, ctx, os.Getenv("SWL_CONFORMANCE_COREDNS_IMAGE"))
	}
	serveEgress(t, egress)
	// The whole path the tests' exec takes: API server, egress proxy, kubelet.
	n.waitUntil(t, "the API server to reach the kubelet through the egress proxy", time.Minute, func() bool {
		b, err := n.core.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", n.name, "proxy", "healthz").DoRaw(ctx)
		return err == nil && string(b) == "ok"
	})

	columns := strings.Split(os.Getenv("SWL_CONFORMANCE_COLUMNS"), ",")
	for _, c := range columns {
		if c != "" && !slices.ContainsFunc(conformancePasses, func(p conformancePass) bool { return p.column == c }) {
			t.Fatalf("SWL_CONFORMANCE_COLUMNS: unknown column %q (want %s and/or %s)", c, conformance.KubeProxy, conformance.Swiftlane)
		}
	}
	for _, p := range conformancePasses {
		if columns[0] != "" && !slices.Contains(columns, p.column) {
			continue
		}
		t.Run(p.column, func(t *testing.T) {
			if p.setup != nil {
				p.setup(t, ctx, n)
			}
			n.runE2E(t, ctx, e2e, filepath.Join(dir, p.column))
		})
	}
}

// A pass is one run of the suite on the same node: first as make
// test-cluster starts it (kube-proxy, iptables mode), then with kube-proxy
// removed and the chart's `swiftlane lb` in its place. Each pass starts
// from the node as it is: SWL_CONFORMANCE_COLUMNS (comma-separated) may
// run one alone.
type conformancePass struct {
	column string
	setup  func(t *testing.T, ctx context.Context, n *node)
}

var conformancePasses = []conformancePass{
	{column: conformance.KubeProxy},
	{column: conformance.Swiftlane, setup: replaceKubeProxy},
}

// replaceKubeProxy does on this node what docs/kubernetes.md ("Replace
// kube-proxy") tells a user to do: stop kube-proxy, clear its rules
// (kube-proxy --cleanup), and helm-install the chart with the load balancer
// on (the release holds nothing else: the agent would change the node's CPU
// scheduler under the second pass only). It returns once the load balancer
// serves: its DaemonSet rolled out and CoreDNS, restarted, reached the API
// server through the kubernetes Service's cluster IP, which only the load
// balancer translates now.
func replaceKubeProxy(t *testing.T, ctx context.Context, n *node) {
	n.stopDaemon(t, "kube-proxy")
	out, err := exec.CommandContext(ctx, filepath.Join(n.env.bin, "kube-proxy"), "--cleanup").CombinedOutput()
	t.Logf("kube-proxy --cleanup: %v\n%s", err, lastBytes(out, 2000))
	// Its exit status also counts IPVS and nftables clean-ups this node has
	// no use for; what matters is that no rule of it is left.
	if rules, err := exec.CommandContext(ctx, "iptables-save").CombinedOutput(); err != nil {
		t.Fatalf("iptables-save: %v\n%s", err, rules)
	} else if left := regexp.MustCompile(`(?m)^-A .*KUBE-(SERVICES|NODEPORTS|SVC-|SEP-|EXT-).*$`).FindAll(rules, 5); len(left) > 0 {
		t.Fatalf("kube-proxy's rules left after kube-proxy --cleanup, e.g.:\n%s", bytes.Join(left, []byte("\n")))
	}

	// The uplink's name (lab/vm.sh takes the virtio NIC as it comes), the
	// API server's address as the node reaches it without Service NAT.
	uplink := interfaceWith(t, nodeIP)
	api, err := url.Parse(n.config.Host)
	if err != nil || api.Hostname() == "" || api.Port() == "" {
		t.Fatalf("the API server's address %q: %v", n.config.Host, err)
	}
	// slirp, the lab's network, finds a destination on its link only by ARP:
	// it answered the pods through kube-proxy's masquerade (the CNI's ipMasq
	// rule). The load balancer's packets bypass netfilter, so a pod's
	// connection to the kubernetes Service leaves with the pod's address,
	// and the uplink must answer ARP for the pods, as a real network routes
	// the pod CIDR to the node. Not needed by the load balancer itself.
	for _, kv := range [][2]string{{"net/ipv4/conf/" + uplink + "/proxy_arp", "1"}, {"net/ipv4/neigh/" + uplink + "/proxy_delay", "0"}} {
		if err := os.WriteFile("/proc/sys/"+kv[0], []byte(kv[1]), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	const release, ns = "swiftlane", "swiftlane-system"
	start := time.Now()
	n.helm(t, "install", release, "deploy/helm/swiftlane", "--namespace", ns, "--create-namespace",
		"--set", "agent.enabled=false", "--set", "api.enabled=false",
		"--set", "lb.enabled=true", "--set", "lb.kubeProxyRemoved=true",
		"--set", "lb.apiServer.host="+api.Hostname(), "--set", "lb.apiServer.port="+api.Port(),
		"--set-json", fmt.Sprintf(`lb.config.interfaces=[%q,"veth*"]`, uplink),
		"--wait", "--timeout", "15m")
	n.rolloutStatus(t, ns, release+"-lb")
	t.Logf("helm install: the load balancer's DaemonSet rolled out in %v", time.Since(start).Round(time.Second))

	if n.env.dns == "" {
		return
	}
	// CoreDNS is ready once its informers listed Services from the API
	// server (its ready plugin waits for the kubernetes plugin), which it
	// dials at the kubernetes Service's cluster IP. Its connections from
	// before still hold kube-proxy's conntrack translation: a new pod opens
	// new ones.
	cs := n.core
	pods, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil {
		t.Fatal(err)
	}
	var old []types.UID
	for _, p := range pods.Items {
		old = append(old, p.UID)
		if err := cs.CoreV1().Pods("kube-system").Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	n.waitUntil(t, "a new CoreDNS pod to be ready through the load balancer", 5*time.Minute, func() bool {
		now, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
		if err != nil {
			return false
		}
		return slices.ContainsFunc(now.Items, func(p corev1.Pod) bool {
			return !slices.Contains(old, p.UID) && p.DeletionTimestamp == nil && slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
				return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
			})
		})
	})
	t.Logf("the load balancer serves: CoreDNS reached the API server through its cluster IP %v after the install", time.Since(start).Round(time.Second))
}

// interfaceWith is the name of the interface that has addr.
func interfaceWith(t *testing.T, addr string) string {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if p, ok := a.(*net.IPNet); ok && p.IP.String() == addr {
				return i.Name
			}
		}
	}
	t.Fatalf("no interface has %s", addr)
	return ""
}

// runE2E runs e2e.test with the package's focus and skips, its output in
// dir/e2e.log and its JUnit report in dir.
func (n *node) runE2E(t *testing.T, ctx context.Context, e2e, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	focus := conformance.Focus
	if f := os.Getenv("SWL_CONFORMANCE_FOCUS"); f != "" {
		focus = f // a subset, while working on one test
	}
	logPath := filepath.Join(dir, "e2e.log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	var skip []string
	if s := conformance.SkipRegexp(); s != "" {
		skip = []string{"--ginkgo.skip", s}
	}
	cmd := exec.CommandContext(ctx, e2e, append(skip,
		"--kubeconfig", n.env.kubeconfig,
		"--kubectl-path", filepath.Join(n.env.bin, "kubectl"),
		// No cloud: the suite skips what needs one (load balancers).
		"--provider", "skeleton",
		"--report-dir", dir,
		"--ginkgo.focus", focus,
		"--ginkgo.no-color", "--ginkgo.v",
		"--ginkgo.timeout", "4h",
		// The node's logs are read here, not over SSH.
		"--disable-log-dump",
	)...)
	// Each spec's progress, for the lines below and the log.
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			io.WriteString(log, line+"\n")
			// Ginkgo's line per finished spec ("• [12.3 seconds]",
			// "• [FAILED] ..."), and its summary.
			if strings.HasPrefix(line, "•") || strings.HasPrefix(line, "Ran ") {
				t.Logf("%v %s", time.Since(start).Round(time.Second), line)
			}
		}
	}()
	err = cmd.Wait()
	pw.Close()
	<-done
	t.Logf("e2e.test: %v after %v (log: %s)", err, time.Since(start).Round(time.Second), logPath)
	// A spec's failure makes e2e.test exit 1: that is a result. What must
	// not happen is no report at all.
	if _, statErr := os.Stat(filepath.Join(dir, "junit_01.xml")); statErr != nil {
		t.Fatalf("e2e.test wrote no JUnit report (%v; exit %v); its log's end:\n%s", statErr, err, kubetest.Tail(logPath, 40))
	}
}

// serveEgress serves kubetest.ConnectProxy on addr: the API server's way
// into the node's network. Only the host's loopback reaches it, through
// QEMU's port forward.
func serveEgress(t *testing.T, addr string) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: kubetest.ConnectProxy}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
}

// deployCoreDNS runs the cluster DNS add-on as kubeadm would: CoreDNS in
// kube-system behind the kube-dns Service at the IP the kubelet gives
// pods. The Service tests reach Services by name; names outside the
// cluster are not resolved (the guest has no way out).
func (n *node) deployCoreDNS(t *testing.T, ctx context.Context, image string) {
	t.Helper()
	if image == "" {
		t.Fatal("SWL_CLUSTER_DNS is set but not SWL_CONFORMANCE_COREDNS_IMAGE")
	}
	const ns, name = "kube-system", "coredns"
	labels := map[string]string{"k8s-app": "kube-dns"}
	cs := n.core
	_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err == nil {
		_, err = cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
				{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
			},
		}, metav1.CreateOptions{})
	}
	if err == nil {
		_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:coredns"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}},
		}, metav1.CreateOptions{})
	}
	if err == nil {
		_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Data: map[string]string{"Corefile": `.:53 {
    errors
    health :8080
    ready :8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 30
}
`},
		}, metav1.CreateOptions{})
	}
	if err == nil {
		_, err = cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Labels: labels},
			Spec: corev1.ServiceSpec{ClusterIP: n.env.dns, Selector: labels, Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP},
			}},
		}, metav1.CreateOptions{})
	}
	if err == nil {
		one := int32(1)
		_, err = cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: appsv1.DeploymentSpec{
				Replicas: &one,
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						ServiceAccountName: name,
						DNSPolicy:          corev1.DNSDefault,
						Containers: []corev1.Container{{
							Name: name, Image: image, ImagePullPolicy: corev1.PullNever,
							Args: []string{"-conf", "/etc/coredns/Corefile"},
							Ports: []corev1.ContainerPort{
								{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
								{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
							},
							ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
								HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8181)}}},
							VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}},
						}},
						Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
							ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}},
					},
				},
			},
		}, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatalf("deploy CoreDNS: %v", err)
	}
	n.waitUntil(t, "CoreDNS to be ready", 5*time.Minute, func() bool {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && d.Status.ReadyReplicas == 1
	})
}
