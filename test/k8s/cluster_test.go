// SPDX-License-Identifier: Apache-2.0
//go:build k8stest

// The control plane the cluster tests share and an admin's view of it:
// kubectl, helm, namespaces, service account tokens, RBAC rules.

package k8s

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/swiftlane/swiftlane/internal/kubetest"
)

// kube is a real control plane (kube-apiserver + etcd) and an admin's clients.
type kube struct {
	kubeconfig string
	config     *rest.Config // admin
	client     kubernetes.Interface

	crdsOnce sync.Once
	crdsErr  error
}

func (k *kube) kubectl(t *testing.T, stdin []byte, args ...string) (string, error) {
	t.Helper()
	return run(t, stdin, tool(t, "kubectl"), append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
}

func (k *kube) helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return run(t, nil, tool(t, "helm"), append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
}

// mustApply server-side applies a manifest as the admin.
func (k *kube) mustApply(t *testing.T, manifest string) {
	t.Helper()
	if out, err := k.kubectl(t, []byte(manifest), "apply", "--server-side", "--field-manager=chart-test", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// applyCRDs installs the chart's CRDs (once per control plane) and waits
// until they are served.
func (k *kube) applyCRDs(t *testing.T) {
	t.Helper()
	k.crdsOnce.Do(func() {
		if _, k.crdsErr = k.kubectl(t, nil, "apply", "--server-side", "--field-manager=chart-test", "-f", filepath.Join(chartDir, "crds")); k.crdsErr != nil {
			return
		}
		_, k.crdsErr = k.kubectl(t, nil, "wait", "--for=condition=Established", "--timeout=60s",
			"crd/schedulingstrategies.swiftlane.io", "crd/schedulingnodes.swiftlane.io", "crd/tokenrevocations.swiftlane.io", "crd/auditentries.swiftlane.io")
	})
	if k.crdsErr != nil {
		t.Fatalf("CRDs: %v", k.crdsErr)
	}
}

// namespace makes sure a namespace exists, with the "default" service
// account pods need (there is no controller manager to create it).
func (k *kube) namespace(t *testing.T, name string) string {
	t.Helper()
	k.mustApply(t, fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %[1]s\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: default\n  namespace: %[1]s\n", name))
	return name
}

// tokenSeconds is the lifetime of service account tokens the tests request.
var tokenSeconds int64 = 3600

// serviceAccountConfig is a client configuration authenticating as a
// service account, with a token from the TokenRequest API; bound to pod
// (if not nil) as the kubelet binds the tokens it projects, so it names the
// pod's node.
func (k *kube) serviceAccountConfig(t *testing.T, ns, name string, pod *corev1.Pod) *rest.Config {
	t.Helper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &tokenSeconds}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := k.client.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), name, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", ns, name, err)
	}
	cfg := rest.AnonymousClientConfig(k.config)
	cfg.BearerToken = tr.Status.Token
	return cfg
}

// agentPod stores a pod of the agent's service account bound to node, the
// object an agent's projected token is bound to (no kubelet runs it).
func (k *kube) agentPod(t *testing.T, ns, sa, node string) *corev1.Pod {
	t.Helper()
	pod, err := k.client.CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "agent-", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName: node, ServiceAccountName: sa, AutomountServiceAccountToken: new(false),
			Containers: []corev1.Container{{Name: "agent", Image: "swiftlane"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// kubeconfigFor writes a kubeconfig for cfg (a service account's).
func kubeconfigFor(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, certificate-authority-data: %s}}]
users: [{name: test, user: {token: %q}}]
contexts: [{name: test, context: {cluster: test, user: test}}]
current-context: test
`, cfg.Host, base64.StdEncoding.EncodeToString(cfg.CAData), cfg.BearerToken)
	f, err := os.CreateTemp(t.TempDir(), "kubeconfig-")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(kc); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// rules is what user may do in namespace ns (cluster-wide rules included),
// one "group/resource verb,verb" line per resource, sorted. The rules every
// authenticated user gets (self-reviews) are left out.
func (k *kube) rules(t *testing.T, user, ns string) []string {
	t.Helper()
	cfg := rest.CopyConfig(k.config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.AuthorizationV1().SelfSubjectRulesReviews().Create(t.Context(), &authorizationv1.SelfSubjectRulesReview{
		Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("rules of %s in %s: %v", user, ns, err)
	}
	if r.Status.Incomplete {
		t.Fatalf("rules of %s in %s incomplete: %s", user, ns, r.Status.EvaluationError)
	}
	verbs := map[string]map[string]bool{}
	for _, rule := range r.Status.ResourceRules {
		for _, g := range rule.APIGroups {
			if g == "authorization.k8s.io" || g == "authentication.k8s.io" {
				continue
			}
			for _, res := range rule.Resources {
				key := g + "/" + res
				if len(rule.ResourceNames) > 0 {
					key += "[" + strings.Join(rule.ResourceNames, ",") + "]"
				}
				if verbs[key] == nil {
					verbs[key] = map[string]bool{}
				}
				for _, v := range rule.Verbs {
					verbs[key][v] = true
				}
			}
		}
	}
	var out []string
	for key, vs := range verbs {
		out = append(out, key+" "+strings.Join(slices.Sorted(maps.Keys(vs)), ","))
	}
	slices.Sort(out)
	return out
}

// workDir holds what the tests build and run (the binary, the control
// plane's data); TestMain removes it.
var workDir string

func TestMain(m *testing.M) {
	var err error
	if workDir, err = os.MkdirTemp("", "swiftlane-k8stest-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	helmHome = filepath.Join(workDir, "helm")
	code := m.Run()
	if shared.server != nil {
		if err := shared.server.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop the control plane:", err)
		}
	}
	os.RemoveAll(workDir)
	os.Exit(code)
}

// shared is the control plane the cluster tests share, started by the
// first test that needs one.
var shared struct {
	once   sync.Once
	server *kubetest.Server
	kube   *kube
	err    error
}

func cluster(t *testing.T) *kube {
	t.Helper()
	shared.once.Do(func() {
		dir := filepath.Join(workDir, "k8s")
		if shared.err = os.MkdirAll(dir, 0o700); shared.err != nil {
			return
		}
		shared.server, shared.err = kubetest.Run(context.Background(), dir, kubetest.Options{BinDir: os.Getenv(kubetest.EnvBinDir)})
		if shared.err != nil {
			return
		}
		cfg := shared.server.RESTConfig()
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			shared.err = err
			return
		}
		shared.kube = &kube{kubeconfig: shared.server.Kubeconfig(), config: cfg, client: c}
	})
	if shared.err != nil {
		t.Fatalf("control plane: %v", shared.err)
	}
	return shared.kube
}
