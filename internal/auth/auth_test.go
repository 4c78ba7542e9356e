// SPDX-License-Identifier: Apache-2.0

package auth

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func TestFirstStartCreatesSecretsOnce(t *testing.T) {
	dir := t.TempDir()
	a, boot, err := LoadOrCreate(dir)
	if err != nil || boot == "" {
		t.Fatalf("first start: %q %v", boot, err)
	}
	for _, f := range []string{KeyFile, CredentialFile} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v, want mode 0600", f, fi.Mode(), err)
		}
	}
	if !a.CheckAdmin(AdminUser, boot) || a.CheckAdmin(AdminUser, boot+"x") || a.CheckAdmin("root", boot) {
		t.Fatal("admin credential check is wrong")
	}
	tok, _, err := a.Issue("t", Viewer, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	b, boot2, err := LoadOrCreate(dir)
	if err != nil || boot2 != "" {
		t.Fatalf("second start must not print a credential again: %q %v", boot2, err)
	}
	if _, err := b.Verify(tok); err != nil {
		t.Fatalf("token from before the restart: %v", err)
	}
	if !b.CheckAdmin(AdminUser, boot) {
		t.Fatal("credential lost on restart")
	}
}

func TestForgedTokensRefused(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	a := New(priv)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	good, _, err := a.Issue("t", Agent, "n1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := a.Verify(good); err != nil || c.Role != Agent || c.Node != "n1" {
		t.Fatalf("good token: %+v %v", c, err)
	}
	claims := Claims{Role: Admin, RegisteredClaims: jwt.RegisteredClaims{Issuer: issuer, ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}}
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, claims).SignedString(jwt.UnsafeAllowNoneSignatureType)
	wrongKey, _ := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims).SignedString(other)
	// The classic confusion: HMAC keyed with the (public) verification key.
	hmac, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(priv.Public().(ed25519.PublicKey)))
	parts := strings.Split(good, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(payload), `"agent"`, `"admin"`, 1))) + "." + parts[2]
	a.now = func() time.Time { return time.Now().Add(-2 * time.Hour) }
	expired, _, _ := a.Issue("t", Admin, "", time.Hour)
	a.now = time.Now
	noExp, _ := jwt.NewWithClaims(jwt.SigningMethodEdDSA, Claims{Role: Admin, RegisteredClaims: jwt.RegisteredClaims{Issuer: issuer}}).SignedString(priv)
	agentNoNode, _ := jwt.NewWithClaims(jwt.SigningMethodEdDSA, Claims{Role: Agent, RegisteredClaims: claims.RegisteredClaims}).SignedString(priv)
	for name, tok := range map[string]string{
		"alg=none": none, "wrong key": wrongKey, "hmac with public key": hmac, "tampered": tampered,
		"expired": expired, "no expiry": noExp, "agent without node": agentNoNode, "garbage": "abc.def.ghi", "empty": "",
	} {
		if _, err := a.Verify(tok); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestIssueChecksRoleAndTTL(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	a := New(priv)
	for _, tc := range []struct {
		role Role
		node string
		ttl  time.Duration
		want string
	}{
		{"root", "", time.Hour, "role:"},
		{Agent, "", time.Hour, "node:"},
		{Viewer, "n1", time.Hour, "node:"},
		{Admin, "", time.Second, "ttl:"},
	} {
		if _, _, err := a.Issue("t", tc.role, tc.node, tc.ttl); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s/%s/%s: %v, want %s", tc.role, tc.node, tc.ttl, err, tc.want)
		}
	}
}

func TestCertGeneratedOnceAndTrusted(t *testing.T) {
	dir := t.TempDir()
	c1, err := LoadOrCreateCert(dir, []string{"10.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(filepath.Join(dir, CertKeyFile))
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("tls.key mode %v", fi.Mode())
	}
	c2, err := LoadOrCreateCert(dir, nil)
	if err != nil || !c1.Leaf.Equal(c2.Leaf) {
		t.Fatalf("certificate regenerated on restart: %v", err)
	}
	cfg, err := ClientTLS(filepath.Join(dir, CertFile))
	if err != nil || cfg.RootCAs == nil {
		t.Fatalf("client trust: %v", err)
	}
}
