// SPDX-License-Identifier: Apache-2.0

package apiclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
)

// Renewer keeps a client's token fresh, so short-lived agent tokens need no
// restart: once less than Left of a token's lifetime remains it asks the
// server for a fresh one (POST /api/v1/tokens/renew) and hands that out
// from then on. A token the source changes (a rotated token file) replaces
// the renewed one. With a token file, the renewed token is also written
// back to it when it is writable, so a restarted agent starts with it.
//
// Given replicas (Failover), a renewal goes to whichever answers, starting
// with the last that did, as the agent's watch moves between them: a token
// must not expire because one replica is down.
type Renewer struct {
	c *Client
	// Failover are the other replicas of c's server.
	Failover []*Client
	src      func() (string, error)
	file     string
	log      *slog.Logger
	// Left is the fraction of a token's lifetime left when it is renewed
	// (default 1/3: a 24 h token is renewed after 16 h).
	Left float64
	// OnRenew, if set, sees every renewal (tests).
	OnRenew func(apitypes.TokenResponse)

	mu   sync.Mutex
	from string // the source's token the current one descends from
	cur  string
	last int // the server that answered the last renewal: 0 c, i+1 Failover[i]
}

// NewRenewer renews the tokens src gives (file: the token file behind src,
// or "").
func NewRenewer(c *Client, src func() (string, error), file string, log *slog.Logger) *Renewer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Renewer{c: c, src: src, file: file, log: log, Left: 1.0 / 3}
}

// Token is the token to send: the source's, or the newest renewal of it.
// It is a token source for Client.WithTokenSource.
func (r *Renewer) Token() (string, error) {
	t, err := r.src()
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if t != r.from { // the first, or a rotated token
		r.from, r.cur = t, t
	}
	return r.cur, nil
}

// recheck bounds a wait, so a rotated token file is noticed within it.
const recheck = time.Minute

// Run renews until ctx ends. A failed renewal is retried with backoff until
// the token expires; the agent's requests say what is wrong meanwhile.
func (r *Renewer) Run(ctx context.Context) error {
	backoff := time.Second
	var readOnly bool
	for {
		wait := recheck
		tok, err := r.Token()
		var due time.Time
		if err == nil {
			if due, err = r.due(tok); err != nil {
				r.log.Warn("token renewal off: the token is not a JWT this agent can read", "err", err)
				<-ctx.Done()
				return nil
			}
			wait = min(time.Until(due), recheck)
		}
		if err == nil && wait <= 0 {
			resp, rerr := r.renew(ctx, tok)
			if rerr == nil {
				r.mu.Lock()
				if r.cur == tok { // not rotated meanwhile
					r.cur = resp.Token
				}
				r.mu.Unlock()
				r.log.Info("token renewed", "id", resp.ID, "expires", resp.ExpiresAt)
				if r.file != "" && !readOnly {
					if werr := writeToken(r.file, resp.Token); werr != nil {
						readOnly = true
						r.log.Info("renewed token kept in memory only: the token file cannot be written (a restart reads the old one)", "file", r.file, "err", werr)
					}
				}
				if r.OnRenew != nil {
					r.OnRenew(resp)
				}
				backoff = time.Second
				continue
			}
			err = rerr
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			r.log.Warn("token renewal failed; retrying", "err", err, "in", backoff)
			wait = backoff
			backoff = min(2*backoff, recheck)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// renewTimeout bounds one server's renewal, so a replica that accepts
// connections and never answers does not hold up the next one.
const renewTimeout = 10 * time.Second

// renew asks the servers in turn, from the last that answered, until one
// answers. A refusal (4xx: revoked, expired) is an answer every replica
// would give; an unreachable or failing server (5xx, 429) is passed over.
func (r *Renewer) renew(ctx context.Context, tok string) (apitypes.TokenResponse, error) {
	servers := append([]*Client{r.c}, r.Failover...)
	var errs []error
	for i := range servers {
		k := (r.last + i) % len(servers)
		rctx, cancel := context.WithTimeout(ctx, renewTimeout)
		resp, err := servers[k].WithToken(tok).RenewToken(rctx, apitypes.RenewRequest{})
		cancel()
		if err == nil {
			if k != r.last {
				r.log.Info("token renewed through another server", "server", servers[k].base)
			}
			r.last = k
			return resp, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", servers[k].base, err))
		var ae *apitypes.Error
		if ctx.Err() != nil || errors.As(err, &ae) && ae.Status < 500 && ae.Status != http.StatusTooManyRequests {
			break
		}
	}
	return apitypes.TokenResponse{}, errors.Join(errs...)
}

// due is when tok should be renewed, read from its claims (not verified:
// only the server can, and it does on renewal).
func (r *Renewer) due(tok string) (time.Time, error) {
	var c auth.Claims
	if _, _, err := jwt.NewParser().ParseUnverified(tok, &c); err != nil {
		return time.Time{}, err
	}
	if c.IssuedAt == nil || c.ExpiresAt == nil {
		return time.Time{}, errors.New("no iat or exp claim")
	}
	life := c.ExpiresAt.Sub(c.IssuedAt.Time)
	return c.ExpiresAt.Add(-time.Duration(float64(life) * r.Left)), nil
}

// writeToken replaces the token file (a rename, which TokenFile notices).
func writeToken(path, tok string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".token-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := fmt.Fprintln(tmp, tok); err == nil {
		err = tmp.Sync()
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
