// SPDX-License-Identifier: Apache-2.0

package apiclient

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/swiftlane/swiftlane/internal/apitypes"
)

// Client talks to the API (used by the agent, `swiftlane ctl` and tests).
// It is safe for concurrent use.
type Client struct {
	base  string
	token string
	// source, when set, gives the token for each request (a token file
	// that may be rotated); token is then unused.
	source func() (string, error)
	http   *http.Client // requests with a deadline
	watch  *http.Client // long-lived streams
}

// NewClient returns a client for base (e.g. https://127.0.0.1:8443) that
// sends token. tlsCfg may be nil for plain HTTP or the system roots.
func NewClient(base, token string, tlsCfg *tls.Config) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsCfg
	tr.MaxIdleConnsPerHost = 16
	return &Client{
		base:  strings.TrimRight(base, "/"),
		token: token,
		http:  &http.Client{Transport: tr, Timeout: 30 * time.Second},
		watch: &http.Client{Transport: tr},
	}
}

// WithToken returns a client sharing connections but sending another token.
func (c *Client) WithToken(token string) *Client {
	cc := *c
	cc.token = token
	return &cc
}

// WithTokenSource returns a client sharing connections that asks source for
// the token before each request and each watch (re)connection, e.g.
// TokenFile, so a rotated token is used without a restart.
func (c *Client) WithTokenSource(source func() (string, error)) *Client {
	cc := *c
	cc.source = source
	return &cc
}

func (c *Client) authorize(req *http.Request) error {
	tok := c.token
	if c.source != nil {
		var err error
		if tok, err = c.source(); err != nil {
			return err
		}
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return nil
}

// TokenFile is a token source that reads path again whenever the file
// changed (another size, modification time or inode: an in-place write, a
// rename over it, or a Kubernetes Secret volume's swap of its ..data
// symlink, since the path is resolved at each stat), and keeps the last
// token read if it cannot be read.
func TokenFile(path string) func() (string, error) {
	var mu sync.Mutex
	var tok string
	var stamp [3]int64
	return func() (string, error) {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		fi, err := os.Stat(path)
		if err != nil {
			if tok != "" {
				return tok, nil // mid-rotation (removed, not yet renamed in)
			}
			return "", fmt.Errorf("token file: %w", err)
		}
		st := [3]int64{fi.Size(), fi.ModTime().UnixNano(), 0}
		if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
			st[2] = int64(sys.Ino)
		}
		if st == stamp && tok != "" {
			return tok, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			if tok != "" {
				return tok, nil
			}
			return "", fmt.Errorf("token file: %w", err)
		}
		if t := strings.TrimSpace(string(b)); t != "" {
			tok, stamp = t, st
			// Timestamps are coarse (a jiffy, or seconds on some file
			// systems): a same-size rewrite soon after this one could keep
			// the stamp. Trust it only once the write is that far back.
			if now.Sub(fi.ModTime()) < racyWindow {
				stamp = [3]int64{}
			}
		}
		if tok == "" {
			return "", fmt.Errorf("token file %s is empty: write the token from `swiftlane token create --role agent --node NAME`", path)
		}
		return tok, nil
	}
}

// racyWindow is how long after its modification a token file is read on
// every request: above the coarsest timestamp granularity in use (2 s, FAT).
const racyWindow = 3 * time.Second

// Do sends in as JSON (if non-nil) and decodes the answer into out (if
// non-nil). API errors come back as *Error.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if err := c.authorize(req); err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return decodeResponse(resp, out)
}

func decodeResponse(resp *http.Response, out any) error {
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 400 {
		e := &apitypes.Error{Status: resp.StatusCode}
		if json.Unmarshal(data, e) != nil || e.Err == "" {
			e.Err = strings.TrimSpace(string(data))
		}
		return e
	}
	if out == nil {
		return nil
	}
	if s, ok := out.(*string); ok {
		*s = string(data)
		return nil
	}
	return json.Unmarshal(data, out)
}

// IsStatus reports whether err is an API error with that HTTP status.
func IsStatus(err error, status int) bool {
	var e *apitypes.Error
	return errors.As(err, &e) && e.Status == status
}

func esc(s string) string { return url.PathEscape(s) }

func (c *Client) Health(ctx context.Context) (apitypes.Health, error) {
	var h apitypes.Health
	return h, c.Do(ctx, "GET", "/health", nil, &h)
}

// Login exchanges the admin credential for a token.
func (c *Client) Login(ctx context.Context, user, password string) (apitypes.TokenResponse, error) {
	var t apitypes.TokenResponse
	return t, c.Do(ctx, "POST", "/api/v1/auth/token", apitypes.LoginRequest{Username: user, Password: password}, &t)
}

func (c *Client) CreateToken(ctx context.Context, req apitypes.TokenRequest) (apitypes.TokenResponse, error) {
	var t apitypes.TokenResponse
	return t, c.Do(ctx, "POST", "/api/v1/tokens", req, &t)
}

// RenewToken trades the client's token for a fresh one (same subject, role
// and node).
func (c *Client) RenewToken(ctx context.Context, req apitypes.RenewRequest) (apitypes.TokenResponse, error) {
	var t apitypes.TokenResponse
	return t, c.Do(ctx, "POST", "/api/v1/tokens/renew", req, &t)
}

// RevokeToken puts a token (by id, or the token itself) on the deny list.
func (c *Client) RevokeToken(ctx context.Context, req apitypes.RevokeRequest) (apitypes.Revoked, error) {
	var out apitypes.Revoked
	return out, c.Do(ctx, "POST", "/api/v1/tokens/revoke", req, &out)
}

// ListAudit reads a page of the audit history (admin): q's filters, at
// most q.Limit entries (0: the server's default), older than q.Before (a
// previous page's Continue).
func (c *Client) ListAudit(ctx context.Context, q apitypes.AuditQuery) (apitypes.AuditList, error) {
	v := url.Values{}
	for _, p := range [][2]string{{"continue", q.Before}, {"subject", q.Subject}, {"operation", q.Operation}, {"kind", q.Kind}, {"name", q.Name}} {
		if p[1] != "" {
			v.Set(p[0], p[1])
		}
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	path := "/api/v2/audit"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var l apitypes.AuditList
	return l, c.Do(ctx, "GET", path, nil, &l)
}

func (c *Client) ListStrategies(ctx context.Context) (apitypes.StrategyList, error) {
	var l apitypes.StrategyList
	return l, c.Do(ctx, "GET", "/api/v1/strategies", nil, &l)
}

func (c *Client) GetStrategy(ctx context.Context, name string) (apitypes.StrategyView, error) {
	var s apitypes.StrategyView
	return s, c.Do(ctx, "GET", "/api/v1/strategies/"+esc(name), nil, &s)
}

func (c *Client) CreateStrategy(ctx context.Context, st apitypes.Strategy) (apitypes.StrategyView, error) {
	var s apitypes.StrategyView
	return s, c.Do(ctx, "POST", "/api/v1/strategies", st, &s)
}

// PutStrategy creates or replaces a strategy by name.
func (c *Client) PutStrategy(ctx context.Context, st apitypes.Strategy) (apitypes.StrategyView, error) {
	var s apitypes.StrategyView
	return s, c.Do(ctx, "PUT", "/api/v1/strategies/"+esc(st.Name), st, &s)
}

func (c *Client) DeleteStrategy(ctx context.Context, name string) (apitypes.Deleted, error) {
	var d apitypes.Deleted
	return d, c.Do(ctx, "DELETE", "/api/v1/strategies/"+esc(name), nil, &d)
}

func (c *Client) ListNodes(ctx context.Context) (apitypes.NodeList, error) {
	var l apitypes.NodeList
	return l, c.Do(ctx, "GET", "/api/v1/nodes", nil, &l)
}

func (c *Client) GetNode(ctx context.Context, name string) (apitypes.Node, error) {
	var n apitypes.Node
	return n, c.Do(ctx, "GET", "/api/v1/nodes/"+esc(name), nil, &n)
}

func (c *Client) DeleteNode(ctx context.Context, name string) error {
	return c.Do(ctx, "DELETE", "/api/v1/nodes/"+esc(name), nil, nil)
}

func (c *Client) RegisterNode(ctx context.Context, name string, r apitypes.Registration) (apitypes.Node, error) {
	var n apitypes.Node
	return n, c.Do(ctx, "PUT", "/api/v1/nodes/"+esc(name), r, &n)
}

func (c *Client) Heartbeat(ctx context.Context, name string, h apitypes.Heartbeat) (apitypes.HeartbeatReply, error) {
	var r apitypes.HeartbeatReply
	return r, c.Do(ctx, "POST", "/api/v1/nodes/"+esc(name)+"/heartbeat", h, &r)
}

func (c *Client) Workloads(ctx context.Context, name string) (apitypes.WorkloadList, error) {
	var l apitypes.WorkloadList
	return l, c.Do(ctx, "GET", "/api/v1/nodes/"+esc(name)+"/workloads", nil, &l)
}

func (c *Client) Carriers(ctx context.Context, name string) (apitypes.CarrierList, error) {
	var l apitypes.CarrierList
	return l, c.Do(ctx, "GET", "/api/v1/nodes/"+esc(name)+"/carriers", nil, &l)
}

// Watch streams strategy events after revision since (0: start with a sync
// event) to fn until ctx ends, the stream breaks, or fn fails. It returns
// the error that ended it; the caller reconnects from the last revision fn
// saw. connected (if non-nil) runs once the server has accepted the stream.
//
// A stream on which nothing arrives (no event, no keep-alive comment) for
// WatchIdle periods of the server's keep-alive ends with an *IdleError: a
// connection whose peer vanished without a FIN or RST would otherwise be
// read from forever, TCP never noticing a peer that is only listened to.
func (c *Client) Watch(ctx context.Context, since uint64, connected func(), fn func(apitypes.WatchEvent) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// Until the server announces its period, the default one's bound also
	// covers a server that accepts the connection and never answers.
	idle := WatchIdle * defaultKeepAlive
	quiet := time.AfterFunc(idle, func() { cancel(&IdleError{Server: c.base, For: idle}) })
	defer quiet.Stop()
	ended := func(err error) error {
		if cause := context.Cause(ctx); cause != nil && errors.As(cause, new(*IdleError)) {
			return cause
		}
		return err
	}
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+"/api/v1/watch/strategies?revision="+strconv.FormatUint(since, 10), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	if err := c.authorize(req); err != nil {
		return err
	}
	resp, err := c.watch.Do(req)
	if err != nil {
		return ended(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ended(decodeResponse(resp, nil))
	}
	if p, err := time.ParseDuration(resp.Header.Get(apitypes.WatchKeepAliveHeader)); err == nil && p > 0 {
		idle = WatchIdle * p
	}
	quiet.Reset(idle)
	if connected != nil {
		connected()
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var data []byte
	for sc.Scan() {
		quiet.Reset(idle)
		line := sc.Bytes()
		switch {
		case len(line) == 0:
			if len(data) == 0 {
				continue
			}
			var ev apitypes.WatchEvent
			if err := json.Unmarshal(data, &ev); err != nil {
				return fmt.Errorf("watch event: %w", err)
			}
			data = data[:0]
			quiet.Stop() // applying is not the server's silence
			if err := fn(ev); err != nil {
				return err
			}
			quiet.Reset(idle)
		case bytes.HasPrefix(line, []byte("data:")):
			data = append(data, bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))...)
		}
		// id:, event: and ":" comments add nothing: the data repeats them.
	}
	if err := sc.Err(); err != nil {
		return ended(err)
	}
	if ctx.Err() != nil {
		return ended(ctx.Err())
	}
	return io.ErrUnexpectedEOF
}

// WatchIdle is how many of the server's keep-alive periods a watch waits
// for anything to arrive before it takes the connection for dead.
const WatchIdle = 3

// defaultKeepAlive is the server's default keep-alive period, assumed
// before the server's answer says its own (and for servers that do not).
const defaultKeepAlive = 15 * time.Second

// IdleError ends a watch stream on which nothing arrived for For.
type IdleError struct {
	Server string
	For    time.Duration
}

func (e *IdleError) Error() string {
	return fmt.Sprintf("watch on %s: nothing received for %s (%d keep-alive periods): the connection is taken for dead", e.Server, e.For, WatchIdle)
}
