// SPDX-License-Identifier: Apache-2.0

package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// ErrRevoked is returned by Verify for a token on the deny list.
var ErrRevoked = errors.New("token revoked")

// DenyList keeps the ids of revoked tokens where every API replica reads
// them: the control plane's store (a bolt record, or TokenRevocation
// objects that every replica watches), not a file of one replica.
type DenyList interface {
	// RevokeToken puts id on the list until until (when the token expires
	// anyway); by is who revoked it. Revoking an id twice is no error. It
	// returns once this process refuses the token.
	RevokeToken(ctx context.Context, id string, until time.Time, by string) error
	// TokenRevoked reports whether id is on the list. Verify refuses the
	// token on an error (fails closed).
	TokenRevoked(id string) (bool, error)
}

// TokenIDPattern is what a token id (jti) looks like: hex now, base64url
// in tokens minted before that.
const TokenIDPattern = `^[A-Za-z0-9_-]{1,64}$`

var tokenIDRE = regexp.MustCompile(TokenIDPattern)

// UseDenyList makes the authority refuse tokens on d.
func (a *Authority) UseDenyList(d DenyList) { a.deny = d }

// Revoke puts a token id on d until exp (the token's expiry; zero: the
// longest lifetime a token can have) and returns that time.
func Revoke(ctx context.Context, d DenyList, id string, exp time.Time, by string, now time.Time) (time.Time, error) {
	if !tokenIDRE.MatchString(id) {
		return time.Time{}, fmt.Errorf("id: %q is not a token id: use the token's id (jti), printed by `swiftlane token create`, or the token itself", id)
	}
	if exp.IsZero() {
		exp = now.Add(MaxTTL)
	}
	exp = exp.UTC().Truncate(time.Second)
	if err := d.RevokeToken(ctx, id, exp, by); err != nil {
		return time.Time{}, fmt.Errorf("revoke token %s: %w", id, err)
	}
	return exp, nil
}

// Revoke puts a token id on the authority's deny list (see Revoke).
func (a *Authority) Revoke(ctx context.Context, id string, exp time.Time, by string) (time.Time, error) {
	if a.deny == nil {
		return time.Time{}, errors.New("no deny list: the authority was opened without one")
	}
	return Revoke(ctx, a.deny, id, exp, by, a.now())
}

// DenyFile is where revocations were kept before the store kept them: a
// JSON object of token id -> expiry in the data directory, which one
// replica alone read and the chart's read-only data directory could not
// hold.
const DenyFile = "revoked.json"

// ImportDenyFile copies the entries of dir's old deny file that have not
// expired into d (again on every start while the file is there: a revoke
// is idempotent). found is false when there is no file.
func ImportDenyFile(ctx context.Context, dir string, d DenyList, now time.Time) (found bool, imported, expired int, err error) {
	path := filepath.Join(dir, DenyFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, 0, 0, nil
	}
	if err != nil {
		return true, 0, 0, fmt.Errorf("old deny list: %w", err)
	}
	ids := map[string]time.Time{}
	if err := json.Unmarshal(data, &ids); err != nil {
		return true, 0, 0, fmt.Errorf("old deny list %s: %w: fix it, or delete it if its tokens have expired", path, err)
	}
	for id, exp := range ids {
		if exp.Before(now) {
			expired++
			continue
		}
		if _, err := Revoke(ctx, d, id, exp, "imported from "+DenyFile, now); err != nil {
			return true, imported, expired, fmt.Errorf("old deny list %s: %w", path, err)
		}
		imported++
	}
	return true, imported, expired, nil
}

// TokenID reads a token's id and expiry after checking its signature (but
// not its expiry: revoking an expired token is harmless).
func (a *Authority) TokenID(token string) (string, time.Time, error) {
	c, err := a.tokenClaims(token)
	if err != nil {
		return "", time.Time{}, err
	}
	var exp time.Time
	if c.ExpiresAt != nil {
		exp = c.ExpiresAt.Time
	}
	return c.ID, exp, nil
}

// TokenFamily is the id of the first token of token's renewal chain ("" for
// a token that was not renewed), after checking its signature.
func (a *Authority) TokenFamily(token string) (string, error) {
	c, err := a.tokenClaims(token)
	if err != nil {
		return "", err
	}
	return c.Family, nil
}

func (a *Authority) tokenClaims(token string) (*Claims, error) {
	var c Claims
	_, err := jwt.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return a.pub, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}), jwt.WithoutClaimsValidation())
	if err != nil {
		return nil, fmt.Errorf("token: %w", err)
	}
	if c.ID == "" {
		return nil, errors.New("token: it has no id (jti)")
	}
	return &c, nil
}
