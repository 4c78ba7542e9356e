// SPDX-License-Identifier: Apache-2.0
//go:build k8stest

// helm install and upgrade: what an upgrade keeps and what it renews.

package k8s

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// helm install and upgrade against the API server: the generated keys are
// kept across upgrades (lookup), the serving certificate is re-signed by the
// same CA when its names change or it nears expiry, and only then does the
// API roll.
func TestChartInstallUpgradeKeepsKeys(t *testing.T) {
	k := cluster(t)
	k.applyCRDs(t)
	const rel, ns = "swl2", "swl2-system"
	k.namespace(t, ns)
	helm := func(args ...string) string {
		t.Helper()
		out, err := k.helm(t, append(args, "--namespace", ns)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return out
	}
	notes := helm("install", rel, chartDir, "--skip-crds")
	// The install notes name the real objects.
	for _, want := range []string{
		"kubectl get schedulingnodes", "kubectl get schedulingstrategies -A",
		"port-forward service/" + rel + "-swiftlane-api 8443:443",
		"get secret " + rel + "-swiftlane-api-auth", `{.data.admin\.credential}`,
		"get secret " + rel + "-swiftlane-api-tls", `{.data.ca\.crt}`,
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("install notes lack %q:\n%s", want, notes)
		}
	}
	t.Cleanup(func() { k.helm(t, "uninstall", rel, "--namespace", ns) })

	type state struct {
		auth, ca, tls map[string][]byte
		rollout       string // the API pod template's checksum/secrets
	}
	read := func() state {
		t.Helper()
		var s state
		for name, dst := range map[string]*map[string][]byte{
			rel + "-swiftlane-api-auth": &s.auth, rel + "-swiftlane-api-ca": &s.ca, rel + "-swiftlane-api-tls": &s.tls,
		} {
			sec, err := k.client.CoreV1().Secrets(ns).Get(t.Context(), name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			*dst = sec.Data
		}
		dep, err := k.client.AppsV1().Deployments(ns).Get(t.Context(), rel+"-swiftlane-api", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.rollout = dep.Spec.Template.Annotations["checksum/secrets"]
		return s
	}
	same := func(what string, a, b map[string][]byte) {
		t.Helper()
		for key := range a {
			if !bytes.Equal(a[key], b[key]) {
				t.Errorf("%s %s changed", what, key)
			}
		}
	}
	verifies := func(s state, name string) {
		t.Helper()
		pair, err := tls.X509KeyPair(s.tls["tls.crt"], s.tls["tls.key"])
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(s.ca["ca.crt"])
		if _, err := pair.Leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("certificate for %s: %v", name, err)
		}
	}

	installed := read()
	verifies(installed, rel+"-swiftlane-api."+ns+".svc")

	helm("upgrade", rel, chartDir)
	upgraded := read()
	same("auth", installed.auth, upgraded.auth)
	same("CA", installed.ca, upgraded.ca)
	same("TLS", installed.tls, upgraded.tls)
	if upgraded.rollout != installed.rollout {
		t.Error("an upgrade that changed no key rolls the API")
	}

	helm("upgrade", rel, chartDir, "--set", "api.tls.extraSANs={ui.example.com}")
	resigned := read()
	same("auth", installed.auth, resigned.auth)
	same("CA", installed.ca, resigned.ca)
	if bytes.Equal(resigned.tls["tls.crt"], installed.tls["tls.crt"]) {
		t.Error("new api.tls.extraSANs did not re-sign the certificate")
	}
	verifies(resigned, "ui.example.com")
	verifies(resigned, rel+"-swiftlane-api."+ns+".svc")
	if resigned.rollout == installed.rollout {
		t.Error("a re-signed certificate does not roll the API")
	}

	// 30 days before expiry the next upgrade re-signs it.
	soon := strconv.FormatInt(time.Now().Add(29*24*time.Hour).Unix(), 10)
	if _, err := k.kubectl(t, nil, "annotate", "--overwrite", "-n", ns, "secret", rel+"-swiftlane-api-tls", "swiftlane.io/not-after="+soon); err != nil {
		t.Fatal(err)
	}
	helm("upgrade", rel, chartDir, "--reuse-values")
	renewed := read()
	if bytes.Equal(renewed.tls["tls.crt"], resigned.tls["tls.crt"]) {
		t.Error("a certificate 29 days from expiry was not re-signed")
	}
	same("CA", installed.ca, renewed.ca)
	verifies(renewed, "ui.example.com")
}
