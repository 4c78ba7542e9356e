// SPDX-License-Identifier: Apache-2.0
//go:build vmtest

package vm

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
	"github.com/swiftlane/swiftlane/internal/apiclient"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
)

// revokeBound is the goal: a token revoked through one replica is
// refused by every replica within a second.
const revokeBound = time.Second

// TestClusterRevoke: revocation in the chart's own deployment, as a user
// installs it with several API replicas. helm install with api.replicas=2
// (the Kubernetes store, the read-only Secret as the data directory); each
// replica is reached at its own pod IP, so which one answers is known (the
// Service would pick one at random). Logged in with the chart's admin
// credential, the test mints a viewer and an agent token, sees both
// accepted by both replicas, then revokes the viewer token whole through
// replica 0 and the agent token by id through replica 1. Every replica
// must refuse each (401) within revokeBound of the revoke's answer; the
// times from the request and from the answer are logged and merged into
// the cluster results, and the deny list is the TokenRevocation objects
// in the release namespace.
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
	admin := reps[0].WithToken(login.Token)
	const probeNode = "revoke-probe" // never registered: an accepted token gets 404
	viewer, err := admin.CreateToken(ctx, apitypes.TokenRequest{Role: string(auth.Viewer)})
	if err != nil {
		t.Fatal(err)
	}
	agent, err := admin.CreateToken(ctx, apitypes.TokenRequest{Role: string(auth.Agent), Node: probeNode})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []apitypes.TokenResponse{viewer, agent} {
		for i, r := range reps {
			if err := probeToken(ctx, r, tok.Token); !apiclient.IsStatus(err, http.StatusNotFound) {
				t.Fatalf("the new %s token on replica %d: %v, want 404 (accepted, no such node)", tok.Role, i, err)
			}
		}
	}

	res := map[string]any{}
	for _, c := range []struct {
		what    string
		through int
		req     apitypes.RevokeRequest
		tok     string
	}{
		{"viewer token, whole", 0, apitypes.RevokeRequest{Token: viewer.Token}, viewer.Token},
		{"agent token, by id", 1, apitypes.RevokeRequest{ID: agent.ID}, agent.Token},
	} {
		sent := time.Now()
		if _, err := reps[c.through].WithToken(login.Token).RevokeToken(ctx, c.req); err != nil {
			t.Fatalf("revoke the %s through replica %d: %v", c.what, c.through, err)
		}
		answered := time.Now()
		refused := awaitRefusal(ctx, reps, c.tok, 10*revokeBound)
		for i, at := range refused {
			if at.IsZero() {
				t.Errorf("%s revoked through replica %d: replica %d still accepts it %v after the answer", c.what, c.through, i, 10*revokeBound)
				continue
			}
			afterAnswer, afterRequest := max(at.Sub(answered), 0), at.Sub(sent)
			t.Logf("%s revoked through replica %d: replica %d refuses it %v after the revoke's answer (%v after its request)",
				c.what, c.through, i, afterAnswer.Round(time.Millisecond), afterRequest.Round(time.Millisecond))
			res[fmt.Sprintf("revoke_via_replica%d_refused_by_replica%d_ms", c.through, i)] = float64(afterAnswer.Microseconds()) / 1000
			if afterAnswer > revokeBound {
				t.Errorf("%s revoked through replica %d: replica %d refused it only %v after the answer, want within %v", c.what, c.through, i, afterAnswer, revokeBound)
			}
		}
	}
	mergeK8sResults(t, res)

	var revs v1alpha1.TokenRevocationList
	if err := n.crd.Get().Namespace(sysNS).Resource(v1alpha1.RevocationsResource.Resource).Do(ctx).Into(&revs); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{viewer.ID, agent.ID} {
		if !slices.ContainsFunc(revs.Items, func(r v1alpha1.TokenRevocation) bool { return r.Spec.TokenID == id }) {
			t.Errorf("no TokenRevocation for token %s in %s", id, sysNS)
		}
	}
}

// probeToken asks replica r something any role may ask, with tok: 404 is an
// accepted token, 401 a refused one.
func probeToken(ctx context.Context, r *apiclient.Client, tok string) error {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := r.WithToken(tok).GetNode(pctx, "revoke-probe")
	return err
}

// awaitRefusal asks every replica with tok, each every 5 ms, until each
// refuses it, and returns when each first did (zero: not within limit).
// The polling is the measurement: each answer is the replica's state.
func awaitRefusal(ctx context.Context, reps []*apiclient.Client, tok string, limit time.Duration) []time.Time {
	at := make([]time.Time, len(reps))
	var wg sync.WaitGroup
	for i, r := range reps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			end := time.After(limit)
			for {
				if apiclient.IsStatus(probeToken(ctx, r, tok), http.StatusUnauthorized) {
					at[i] = time.Now()
					return
				}
				select {
				case <-tick.C:
				case <-end:
					return
				}
			}
		}()
	}
	wg.Wait()
	return at
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
