// SPDX-License-Identifier: Apache-2.0
//go:build vmtest

package vm

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
	"github.com/swiftlane/swiftlane/internal/apiclient"
	"github.com/swiftlane/swiftlane/internal/apiclient/replicatest"
	"github.com/swiftlane/swiftlane/internal/auth"
)

// TestClusterRevoke: revocation in the chart's own deployment, as a user
// installs it with several API replicas. helm install with api.replicas=2
// (the Kubernetes store, the read-only Secret as the data directory); each
// replica is reached at its own pod IP, so which one answers is known (the
// Service would pick one at random). Logged in with the chart's admin
// credential, the test mints a viewer and an agent token, sees both
// accepted by both replicas, then revokes the viewer token whole through
// replica 0 and the agent token by id through replica 1
// (replicatest.Revoke). Every replica must refuse each (401) within 1 s of
// the revoke's answer; the times from the request and from the answer are
// logged and merged into the cluster results, and the deny list is the
// TokenRevocation objects in the release namespace. test/k8s's
// TestChartAPIReplicasRevoke runs the same with the chart's rendered API
// as host processes.
func TestClusterRevoke(t *testing.T) {
	ctx := runCtx(t, 30*time.Minute)
	n := clusterNode(t, ctx)
	const release, sysNS = "swiftlane", "swiftlane-system"
	t.Cleanup(func() {
		n.dump()
		if out, err := n.command("helm", "uninstall", release, "--namespace", sysNS, "--ignore-not-found",
			"--wait", "--timeout", "10m").CombinedOutput(); err != nil {
			t.Errorf("helm uninstall: %v\n%s", err, out)
		}
		waitState(t, "disabled")
	})
	n.helm(t, "install", release, "deploy/helm/swiftlane", "--namespace", sysNS, "--create-namespace",
		"--set", "api.replicas=2", "--wait", "--timeout", "15m")
	reps := n.apiReplicas(t, ctx, sysNS, release, 2)

	authSecret, err := n.core.CoreV1().Secrets(sysNS).Get(ctx, release+"-api-auth", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	login, err := reps[0].Login(ctx, auth.AdminUser, strings.TrimSpace(string(authSecret.Data[auth.CredentialFile])))
	if err != nil {
		t.Fatalf("log in with the chart's admin credential through replica 0: %v", err)
	}
	ids, ms := replicatest.Revoke(ctx, t, reps, login.Token, replicatest.RevokeBound)
	res := map[string]any{}
	for k, v := range ms {
		res[k] = v
	}
	mergeK8sResults(t, res)

	var revs v1alpha1.TokenRevocationList
	if err := n.crd.Get().Namespace(sysNS).Resource(v1alpha1.RevocationsResource.Resource).Do(ctx).Into(&revs); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if !slices.ContainsFunc(revs.Items, func(r v1alpha1.TokenRevocation) bool { return r.Spec.TokenID == id }) {
			t.Errorf("no TokenRevocation for token %s in %s", id, sysNS)
		}
	}
}

// apiReplicas waits for want Ready API pods of the release and returns a
// client for each at its pod IP, trusting the chart's CA under the
// Service's name (the certificate has no pod IPs).
func (n *node) apiReplicas(t *testing.T, ctx context.Context, ns, release string, want int) []*apiclient.Client {
	t.Helper()
	var addrs []string
	n.waitUntil(t, "both API replicas to be Ready", 5*time.Minute, func() bool {
		pods, err := n.core.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=api,app.kubernetes.io/instance=" + release})
		if err != nil {
			return false
		}
		addrs = addrs[:0]
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Status.PodIP != "" && slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
				return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
			}) {
				addrs = append(addrs, fmt.Sprintf("%s:%d", p.Status.PodIP, httpsPort(p)))
			}
		}
		return len(addrs) == want
	})
	tlsSecret, err := n.core.CoreV1().Secrets(ns).Get(ctx, release+"-api-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(tlsSecret.Data["ca.crt"]) {
		t.Fatalf("secret %s-api-tls has no CA certificate in ca.crt", release)
	}
	cfg := &tls.Config{RootCAs: roots, ServerName: release + "-api." + ns + ".svc", MinVersion: tls.VersionTLS12}
	var out []*apiclient.Client
	for _, addr := range addrs {
		c := apiclient.NewClient("https://"+addr, "", cfg)
		if _, err := c.Health(ctx); err != nil {
			t.Fatalf("API replica at %s: %v", addr, err)
		}
		out = append(out, c)
	}
	t.Logf("API replicas at %v", addrs)
	return out
}

// httpsPort is the API container's port named https (api.port).
func httpsPort(p corev1.Pod) int32 {
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == "https" {
				return port.ContainerPort
			}
		}
	}
	return 8443 // the chart's default
}
