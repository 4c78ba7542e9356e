// SPDX-License-Identifier: Apache-2.0
//go:build k8stest

package k8s

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
	"github.com/swiftlane/swiftlane/internal/apiclient"
	"github.com/swiftlane/swiftlane/internal/apiclient/replicatest"
	"github.com/swiftlane/swiftlane/internal/auth"
)

// TestChartAPIReplicasRevoke: the chart's API Deployment with
// api.replicas=2, each replica the real `swiftlane api` started with the
// rendered arguments and Secrets (the read-only data directory, the
// Kubernetes store) under the chart's API service account. A viewer token
// revoked whole through replica 0 and an agent token revoked by id through
// replica 1 are each refused by both replicas within 1 s of the revoke's
// answer (replicatest.Revoke), through TokenRevocation objects the chart's
// RBAC lets them write and watch. The cluster lab's TestClusterRevoke does
// the same with the chart installed by helm on a node.
func TestChartAPIReplicasRevoke(t *testing.T) {
	bin := swiftlane(t) // before any deadline: the build takes a while
	k := cluster(t)
	objs := k.applyChart(t, "--set", "api.replicas=2")
	var dep appsv1.Deployment
	find(t, objs, "Deployment", testRelease+"-swiftlane-api", &dep)
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Fatalf("the API Deployment has replicas %v, want 2", dep.Spec.Replicas)
	}
	var tlsSecret, authSecret corev1.Secret
	find(t, objs, "Secret", testRelease+"-swiftlane-api-tls", &tlsSecret)
	find(t, objs, "Secret", testRelease+"-swiftlane-api-auth", &authSecret)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(tlsSecret.Data["ca.crt"]) {
		t.Fatal("the chart's TLS Secret has no CA certificate")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	var procs []*process
	var reps []*apiclient.Client
	for range *dep.Spec.Replicas {
		p := k.start(t, bin, objs, dep.Spec.Template.Spec, "", k.serviceAccountConfig(t, testNamespace, testRelease+"-swiftlane-api", nil))
		addr := p.await(t, ctx, regexp.MustCompile(`control plane on https://(\S+)`))
		procs = append(procs, p)
		reps = append(reps, apiclient.NewClient("https://"+addr, "", &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}))
	}
	login, err := reps[0].Login(ctx, auth.AdminUser, strings.TrimSpace(string(authSecret.Data[auth.CredentialFile])))
	if err != nil {
		t.Fatalf("log in with the chart's admin credential: %v\napi:\n%s", err, procs[0].log.String())
	}
	ids, _ := replicatest.Revoke(ctx, t, reps, login.Token, replicatest.RevokeBound)

	crd, err := v1alpha1.NewRESTClient(k.config)
	if err != nil {
		t.Fatal(err)
	}
	var revs v1alpha1.TokenRevocationList
	if err := crd.Get().Namespace(testNamespace).Resource(v1alpha1.RevocationsResource.Resource).Do(ctx).Into(&revs); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if !slices.ContainsFunc(revs.Items, func(r v1alpha1.TokenRevocation) bool { return r.Spec.TokenID == id }) {
			t.Errorf("no TokenRevocation for token %s in %s", id, testNamespace)
		}
	}
	for i, p := range procs {
		if err := p.stop(); err != nil {
			t.Errorf("replica %d did not exit cleanly on SIGTERM: %v\n%s", i, err, p.log.String())
		}
		if strings.Contains(strings.ToLower(p.log.String()), "forbidden") {
			t.Errorf("replica %d was refused something:\n%s", i, p.log.String())
		}
	}
}
