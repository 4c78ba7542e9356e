// SPDX-License-Identifier: Apache-2.0

// Package auth issues and checks the control plane's tokens: EdDSA-signed
// JWTs that expire and carry a role (admin, viewer, or agent bound to one
// node). The signing key and the bootstrap admin credential are generated on
// the server's first start and kept in its data directory (mode 0600);
// nothing secret ever comes from the repository.
package auth

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Role is what a token may do.
type Role string

const (
	// Admin may read and write everything and mint tokens.
	Admin Role = "admin"
	// Viewer may read everything.
	Viewer Role = "viewer"
	// Agent may register and heartbeat as its node and read the strategies
	// for that node only.
	Agent Role = "agent"
)

// Roles lists the valid roles.
var Roles = []Role{Admin, Viewer, Agent}

// Files in the data directory.
const (
	KeyFile        = "signing.key"
	CredentialFile = "admin.credential"
	// AdminUser is the bootstrap admin's user name.
	AdminUser = "admin"
	issuer    = "swiftlane"
)

// Bounds of a token's lifetime.
const (
	MinTTL = time.Minute
	MaxTTL = 5 * 365 * 24 * time.Hour
	// DefaultAgentTTL is an agent token's default lifetime: short, since
	// agents renew their tokens (POST /api/v1/tokens/renew) before expiry.
	DefaultAgentTTL = 24 * time.Hour
)

// NodePattern is a node name (or "", for no node): what ValidNodeName
// accepts, as documented in /openapi.json.
const NodePattern = `^([a-z0-9]([a-z0-9._-]{0,251}[a-z0-9])?)?$`

var nodeRE = regexp.MustCompile(NodePattern)

// ValidNodeName reports whether name can name a node (a DNS subdomain-ish name).
func ValidNodeName(name string) bool { return name != "" && nodeRE.MatchString(name) }

// Claims are the token's payload.
type Claims struct {
	Role Role   `json:"role"`
	Node string `json:"node,omitempty"`
	// Family is the id of the first token of a renewal chain (set on
	// renewed tokens): revoking that id revokes every renewal of it.
	Family string `json:"fam,omitempty"`
	jwt.RegisteredClaims
}

// CheckRole validates a role/node pair for a new token; the error names the
// flag or field to fix.
func CheckRole(role Role, node string) error {
	switch role {
	case Admin, Viewer:
		if node != "" {
			return fmt.Errorf("node: only agent tokens are bound to a node; drop it for role %s", role)
		}
	case Agent:
		if !ValidNodeName(node) {
			return fmt.Errorf("node: %q is not a node name: agent tokens need one (lower-case letters, digits, '.', '_', '-')", node)
		}
	default:
		return fmt.Errorf("role: unknown role %q: use admin, viewer or agent", role)
	}
	return nil
}

// Authority signs and verifies tokens. It is safe for concurrent use.
type Authority struct {
	priv      ed25519.PrivateKey
	pub       ed25519.PublicKey
	adminHash [sha256.Size]byte // of the bootstrap credential; zero when unknown
	now       func() time.Time
	deny      DenyList // nil: no revocations
}

// LoadOrCreate opens the authority kept in dir, creating the signing key and
// the bootstrap admin credential on first use. bootstrap is the new
// credential when it was just created (print it once), else "".
func LoadOrCreate(dir string) (a *Authority, bootstrap string, err error) {
	return LoadOrCreateKey(dir, "")
}

// LoadOrCreateKey is LoadOrCreate with the signing key at keyPath (created
// there if missing) instead of dir/signing.key; "" means the latter.
func LoadOrCreateKey(dir, keyPath string) (a *Authority, bootstrap string, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", fmt.Errorf("data dir: %w", err)
	}
	if keyPath == "" {
		keyPath = filepath.Join(dir, KeyFile)
	}
	priv, err := readKey(keyPath)
	if errors.Is(err, fs.ErrNotExist) {
		_, priv, err = ed25519.GenerateKey(rand.Reader)
		if err == nil {
			err = writeKey(keyPath, priv)
		}
	}
	if err != nil {
		return nil, "", err
	}
	a = New(priv)
	credPath := filepath.Join(dir, CredentialFile)
	cred, err := os.ReadFile(credPath)
	if errors.Is(err, fs.ErrNotExist) {
		buf := make([]byte, 24)
		if _, err := rand.Read(buf); err != nil {
			return nil, "", err
		}
		bootstrap = base64.RawURLEncoding.EncodeToString(buf)
		cred = []byte(bootstrap + "\n")
		if err := writeExclusive(credPath, cred); err != nil {
			return nil, "", err
		}
	} else if err != nil {
		return nil, "", fmt.Errorf("read %s: %w", credPath, err)
	}
	a.adminHash = sha256.Sum256([]byte(strings.TrimSpace(string(cred))))
	return a, bootstrap, nil
}

// LoadSigner opens an existing authority's key without creating anything
// (for minting tokens on the server's machine).
func LoadSigner(dir string) (*Authority, error) {
	priv, err := readKey(filepath.Join(dir, KeyFile))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no signing key in %s: start `swiftlane api --data-dir %s` once first, or pass --server to mint through the API", dir, dir)
		}
		return nil, err
	}
	return New(priv), nil
}

// New is an authority over a key (tests).
func New(priv ed25519.PrivateKey) *Authority {
	return &Authority{priv: priv, pub: priv.Public().(ed25519.PublicKey), now: time.Now}
}

func readKey(path string) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(data)
	if blk == nil {
		return nil, fmt.Errorf("%s: not a PEM file; delete it to generate a new key (this invalidates every token)", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: not an Ed25519 key", path)
	}
	return priv, nil
}

func writeKey(path string, priv ed25519.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return err
	}
	return writeExclusive(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}

// writeExclusive creates a 0600 file that must not exist yet, synced to disk.
func writeExclusive(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// CheckAdmin compares a presented credential with the bootstrap admin's in
// constant time.
func (a *Authority) CheckAdmin(user, secret string) bool {
	var zero [sha256.Size]byte
	if a.adminHash == zero || user != AdminUser {
		return false
	}
	h := sha256.Sum256([]byte(secret))
	return subtle.ConstantTimeCompare(h[:], a.adminHash[:]) == 1
}

// Issue signs a token for role (and node, for agents) valid for ttl.
func (a *Authority) Issue(subject string, role Role, node string, ttl time.Duration) (string, time.Time, error) {
	return a.issue(subject, role, node, "", ttl)
}

// Renew signs a fresh token for the subject, role and node of c (verified
// claims: Verify has refused it if expired or revoked), valid for ttl, in
// c's renewal chain.
func (a *Authority) Renew(c *Claims, ttl time.Duration) (string, time.Time, error) {
	family := c.Family
	if family == "" {
		family = c.ID
	}
	return a.issue(c.Subject, c.Role, c.Node, family, ttl)
}

// WithClock is the authority with another clock (tests: expired tokens).
func (a *Authority) WithClock(now func() time.Time) *Authority {
	b := *a
	b.now = now
	return &b
}

func (a *Authority) issue(subject string, role Role, node, family string, ttl time.Duration) (string, time.Time, error) {
	if err := CheckRole(role, node); err != nil {
		return "", time.Time{}, err
	}
	if ttl < MinTTL || ttl > MaxTTL {
		return "", time.Time{}, fmt.Errorf("ttl: %s is out of range: use %s..%s", ttl, MinTTL, MaxTTL)
	}
	now := a.now()
	exp := now.Add(ttl).Truncate(time.Second)
	jti := make([]byte, 12)
	if _, err := rand.Read(jti); err != nil {
		return "", time.Time{}, err
	}
	c := Claims{Role: role, Node: node, Family: family, RegisteredClaims: jwt.RegisteredClaims{
		Issuer:    issuer,
		Subject:   subject,
		IssuedAt:  jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now.Add(-time.Minute)), // tolerate small clock skew
		ExpiresAt: jwt.NewNumericDate(exp),
		// Hex, not base64url: an ID that began with '-' read as a flag in
		// `swiftlane token revoke ID`.
		ID: hex.EncodeToString(jti),
	}}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, c).SignedString(a.priv)
	return tok, exp, err
}

// Verify checks a token's signature (EdDSA with this authority's key only:
// alg=none and other algorithms are refused), expiry, issuer and role.
func (a *Authority) Verify(token string) (*Claims, error) {
	var c Claims
	_, err := jwt.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return a.pub, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithIssuer(issuer),
		jwt.WithTimeFunc(a.now),
	)
	if err != nil {
		return nil, err
	}
	if err := CheckRole(c.Role, c.Node); err != nil {
		return nil, fmt.Errorf("token claims: %w", err)
	}
	if a.deny != nil {
		for _, id := range []string{c.ID, c.Family} {
			if id == "" {
				continue
			}
			if revoked, err := a.deny.TokenRevoked(id); err != nil {
				return nil, fmt.Errorf("deny list: %w", err)
			} else if revoked {
				return nil, fmt.Errorf("%w (id %s)", ErrRevoked, id)
			}
		}
	}
	return &c, nil
}
