// SPDX-License-Identifier: Apache-2.0

package kubetest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// A namespace written through client-go is what kubectl reads back; the
// admin token, service-account tokens and RBAC work as on a real cluster.
func TestControlPlane(t *testing.T) {
	env := Start(t)
	cs := kubernetes.NewForConfigOrDie(env.RESTConfig())

	ns, err := cs.CoreV1().Namespaces().Create(t.Context(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kubetest-self"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	out := env.Kubectl(t, "get", "namespace", "kubetest-self", "-o", "jsonpath={.metadata.uid}")
	if out != string(ns.UID) {
		t.Fatalf("kubectl sees namespace uid %q, client-go created %q", out, ns.UID)
	}
	if names := env.Kubectl(t, "get", "namespaces", "-o", "name"); !strings.Contains(names, "namespace/kubetest-self\n") {
		t.Fatalf("kubectl get namespaces lacks kubetest-self:\n%s", names)
	}

	// Who the credentials are: the admin token is in system:masters, and a
	// TokenRequest token (signed with the service-account key) is the SA.
	who := func(cfg *rest.Config) authnv1.UserInfo {
		t.Helper()
		r, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(t.Context(),
			&authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("SelfSubjectReview: %v", err)
		}
		return r.Status.UserInfo
	}
	if u := who(env.RESTConfig()); u.Username != "kubetest-admin" || !slices.Contains(u.Groups, "system:masters") {
		t.Fatalf("admin token authenticates as %+v", u)
	}
	// The certificate the apiserver shows kubelets (exec, logs) is one that
	// a kubelet trusting the cluster's CA takes for an admin; the
	// apiserver checks client certificates against the same CA.
	kc := rest.AnonymousClientConfig(env.RESTConfig())
	kc.CertFile = filepath.Join(env.Dir, "pki", "apiserver-kubelet-client.crt")
	kc.KeyFile = filepath.Join(env.Dir, "pki", "apiserver-kubelet-client.key")
	if u := who(kc); u.Username != "kube-apiserver-kubelet-client" || !slices.Contains(u.Groups, "system:masters") {
		t.Fatalf("the kubelet client certificate authenticates as %+v", u)
	}
	if _, err := cs.CoreV1().ServiceAccounts("kubetest-self").Create(t.Context(),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("kubetest-self").CreateToken(t.Context(), "probe",
		&authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest: %v", err)
	}
	saCfg := rest.AnonymousClientConfig(env.RESTConfig())
	saCfg.BearerToken = tr.Status.Token
	if u := who(saCfg); u.Username != "system:serviceaccount:kubetest-self:probe" {
		t.Fatalf("service-account token authenticates as %+v", u)
	}
	// RBAC is on: neither the SA nor an anonymous client may list namespaces.
	for name, cfg := range map[string]*rest.Config{"service account": saCfg, "anonymous": rest.AnonymousClientConfig(env.RESTConfig())} {
		_, err = kubernetes.NewForConfigOrDie(cfg).CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("%s lists namespaces: got %v, want Forbidden", name, err)
		}
	}

	if v := env.Kubectl(t, "version", "-o", "json"); !strings.Contains(v, `"gitVersion": "v1.`) {
		t.Fatalf("kubectl version reports no release version (lab/k8s.sh -ldflags):\n%s", v)
	}
}

// The kubeconfig written for another address is only valid for addresses
// the certificate names: an extra IP works, an unnamed one fails
// verification. Both resolve to this host (127.0.0.2 is loopback too).
func TestKubeconfigForOtherAddress(t *testing.T) {
	env := Start(t, WithExtraIPs(net.ParseIP("127.0.0.2")))
	dir := t.TempDir()

	// The server binds 127.0.0.1 only; a forwarder makes it reachable at
	// 127.0.0.2 the way QEMU's slirp makes it reachable at 10.0.2.2.
	alt := forward(t, "127.0.0.2:0", fmt.Sprintf("127.0.0.1:%d", env.Port))
	good := filepath.Join(dir, "good")
	if err := env.WriteKubeconfig(good, "https://"+alt); err != nil {
		t.Fatal(err)
	}
	if out := env.Kubectl(t, "--kubeconfig", good, "get", "namespace", "default", "-o", "name"); out != "namespace/default\n" {
		t.Fatalf("via %s: got %q", alt, out)
	}

	bad := filepath.Join(dir, "bad")
	unnamed := forward(t, "127.0.0.3:0", fmt.Sprintf("127.0.0.1:%d", env.Port))
	if err := env.WriteKubeconfig(bad, "https://"+unnamed); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := env.Command(t.Context(), "kubectl", "--kubeconfig", bad, "get", "namespace", "default")
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), "certificate is valid for") {
		t.Fatalf("kubectl via unnamed %s: err %v, stderr %q; want a certificate name error", unnamed, err, stderr.String())
	}
}

// forward accepts on listen and pipes each connection to target until t ends.
func forward(t *testing.T, listen, target string) string {
	t.Helper()
	l, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatalf("listen %s: %v", listen, err)
	}
	t.Cleanup(func() { l.Close() })
	go relay(l, target)
	return l.Addr().String()
}

// A lab/vm.sh --net guest reaches the host's kube-apiserver at 10.0.2.2 with
// the built kubectl: it sees a namespace the host made, and the host sees
// one the guest made. Boots a VM (30-150 s): only with SWL_K8S_VM=1.
func TestGuestReachesHostAPIServer(t *testing.T) {
	if os.Getenv("SWL_K8S_VM") != "1" {
		t.Skip("boots a VM: run `make test-k8s-vm` (or set SWL_K8S_VM=1)")
	}
	env := Start(t, WithExtraIPs(net.ParseIP(GuestHost)))
	cs := kubernetes.NewForConfigOrDie(env.RESTConfig())
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "from-host"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The guest sees the host root read-only and the repo read-write, but
	// not the host's /tmp: the kubeconfig goes under the repo.
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(repo, ".cache", "kubetest")
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(base, "guest.")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	kc := filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeconfig(kc, env.URLFor(GuestHost)); err != nil {
		t.Fatal(err)
	}

	kubectl := filepath.Join(env.BinDir, "kubectl")
	script := fmt.Sprintf(`set -e
%[1]s --kubeconfig %[2]s get namespaces -o name
%[1]s --kubeconfig %[2]s create namespace from-guest`, kubectl, kc)
	cmd := exec.CommandContext(t.Context(), "bash", filepath.Join(repo, "lab", "vm.sh"),
		"--net", "--timeout", "600", "--", "bash", "-c", script)
	cmd.Dir = repo
	out, err := cmd.CombinedOutput()
	t.Logf("guest:\n%s", out)
	if err != nil {
		t.Fatalf("lab/vm.sh --net: %v", err)
	}
	if !strings.Contains(string(out), "namespace/from-host\n") {
		t.Fatal("the guest's kubectl did not list the host's namespace")
	}
	if _, err := cs.CoreV1().Namespaces().Get(t.Context(), "from-guest", metav1.GetOptions{}); err != nil {
		t.Fatalf("namespace created in the guest: %v", err)
	}
}
