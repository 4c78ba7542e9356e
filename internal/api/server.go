// SPDX-License-Identifier: Apache-2.0

// Package api is swiftlane's control-plane REST server (and its Go client):
// strategies with a push watch, nodes with heartbeats and resolved
// workloads, tokens, the generation-1 endpoints, the OpenAPI document and
// the web UI. The JSON it exchanges is defined in internal/apitypes.
package api

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/store"
)

// DefaultMaxBody bounds request bodies.
const DefaultMaxBody = 1 << 20

// Options configure a Server.
type Options struct {
	Store store.Store
	// Auth signs and checks tokens; New makes the store its deny list.
	Auth    *auth.Authority
	Log     *slog.Logger
	Version string
	// MaxBody bounds request bodies (default DefaultMaxBody).
	MaxBody int64
	// UI serves the web UI at / (nil: none).
	UI http.Handler
	// KeepAlive is the watch stream's idle comment period (default 15 s).
	KeepAlive time.Duration
	// LoginTTL, AgentTTL and TokenTTL are the default lifetimes of tokens
	// from the login, of agent tokens and of other tokens minted through
	// the API (12 h, auth.DefaultAgentTTL, 12 h); renewals get the same.
	LoginTTL, AgentTTL, TokenTTL time.Duration
	// Timeouts of the HTTP server (zero fields: Go's defaults, except
	// ReadHeader 10 s, Idle 2 min, Shutdown 5 s).
	Timeouts Timeouts
}

// Timeouts bound the server's connections; Write does not apply to watch
// streams.
type Timeouts struct {
	ReadHeader, Read, Write, Idle, Shutdown time.Duration
}

// Server serves the API. It is safe for concurrent use.
type Server struct {
	o       Options
	handler http.Handler
	doc     []byte
	hub     hub
	feed    feed
	reg     *prometheus.Registry
	met     serverMetrics

	// podLabels: the store's agents know pods (Kubernetes), so pod
	// selectors can match.
	podLabels bool
	// host names this replica in the audit history.
	host string

	mu   sync.Mutex
	gen1 map[string]*apitypes.Gen1Metrics // pushed generation-1 metrics by node (not persisted)
}

// New builds a server over a store and an authority.
func New(o Options) (*Server, error) {
	if o.Store == nil || o.Auth == nil {
		return nil, errors.New("api: Store and Auth are required")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.MaxBody <= 0 {
		o.MaxBody = DefaultMaxBody
	}
	if o.KeepAlive <= 0 {
		o.KeepAlive = 15 * time.Second
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{
		{&o.LoginTTL, 12 * time.Hour}, {&o.AgentTTL, auth.DefaultAgentTTL}, {&o.TokenTTL, 12 * time.Hour},
		{&o.Timeouts.ReadHeader, 10 * time.Second}, {&o.Timeouts.Idle, 2 * time.Minute}, {&o.Timeouts.Shutdown, 5 * time.Second},
	} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	o.Auth.UseDenyList(o.Store)
	s := &Server{o: o, gen1: map[string]*apitypes.Gen1Metrics{}}
	s.host, _ = os.Hostname()
	s.hub.subs = map[chan struct{}]struct{}{}
	// A store that others write too (Kubernetes: kubectl, other replicas)
	// reports their changes, so watch streams see them at once.
	if n, ok := o.Store.(interface{ OnChange(func()) }); ok {
		n.OnChange(s.hub.notify)
	}
	if p, ok := o.Store.(interface{ ResolvesPodLabels() bool }); ok {
		s.podLabels = p.ResolvesPodLabels()
	}
	s.initMetrics()
	doc, err := openAPIDocument(routes(), o.Version)
	if err != nil {
		return nil, err
	}
	s.doc = doc
	s.handler = s.buildMux()
	return s, nil
}

// Handler is the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) buildMux() http.Handler {
	mux := http.NewServeMux()
	paths := http.NewServeMux() // method-less patterns, to tell 405 from 404
	allow := map[string][]string{}
	for _, rt := range routes() {
		mux.Handle(rt.method+" "+rt.path, s.wrap(rt))
		if _, ok := allow[rt.path]; !ok {
			paths.Handle(rt.path, http.NotFoundHandler())
		}
		allow[rt.path] = append(allow[rt.path], rt.method)
	}
	notFound := func(w http.ResponseWriter, r *http.Request) {
		if _, p := paths.Handler(r); p != "" {
			w.Header().Set("Allow", strings.Join(allow[p], ", "))
			writeError(w, errorf(http.StatusMethodNotAllowed, "", "use "+strings.Join(allow[p], " or "), "%s is not allowed on %s", r.Method, r.URL.Path))
			return
		}
		writeError(w, errorf(http.StatusNotFound, "", "see /openapi.json for the endpoints", "no endpoint %s", r.URL.Path))
	}
	mux.HandleFunc("/api/", notFound)
	for _, p := range []string{"/health", "/openapi.json", "/metrics"} {
		mux.HandleFunc(p, notFound)
	}
	if s.o.UI != nil {
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				w.Header().Set("Allow", "GET")
				writeError(w, errorf(http.StatusMethodNotAllowed, "", "the UI is read with GET; the API is under /api/v1", "%s is not allowed on %s", r.Method, r.URL.Path))
				return
			}
			s.o.UI.ServeHTTP(w, r)
		})
	} else {
		mux.HandleFunc("/", notFound)
	}
	return mux
}

// wrap authenticates, authorizes and runs one route.
func (s *Server) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		if rt.audit != "" {
			s.serveAudited(rt, sw, r)
		} else if err := s.serve(rt, sw, r); err != nil {
			writeError(sw, err)
		}
		if !rt.stream {
			s.met.requests.WithLabelValues(rt.op, fmt.Sprint(sw.status)).Inc()
			s.met.latency.WithLabelValues(rt.op).Observe(time.Since(start).Seconds())
		}
	})
}

func (s *Server) serve(rt route, w http.ResponseWriter, r *http.Request) error {
	var claims *auth.Claims
	if rt.roles != nil {
		c, err := s.authenticate(r)
		if err != nil {
			return err
		}
		rec := auditOf(r)
		rec.caller = c
		if !slices.Contains(rt.roles, c.Role) {
			return errorf(http.StatusForbidden, "", "ask an admin for a token with one of the roles: "+joinRoles(rt.roles), "role %s may not %s %s", c.Role, r.Method, r.URL.Path)
		}
		if rt.nodeScoped && c.Role == auth.Agent && r.PathValue("name") != c.Node {
			return errorf(http.StatusForbidden, "name", "an agent token acts for its own node only ("+c.Node+")", "token for node %s may not act for node %s", c.Node, r.PathValue("name"))
		}
		claims, rec.authorized = c, true
	}
	if rt.in != nil {
		r.Body = http.MaxBytesReader(w, r.Body, s.o.MaxBody)
	}
	return rt.handle(s, w, r, claims)
}

func joinRoles(rs []auth.Role) string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = string(r)
	}
	return strings.Join(out, ", ")
}

func (s *Server) authenticate(r *http.Request) (*auth.Claims, error) {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" {
		return nil, errorf(http.StatusUnauthorized, "Authorization", "send 'Authorization: Bearer <token>'; get one with POST /api/v1/auth/token or `swiftlane token create`", "missing bearer token")
	}
	c, err := s.o.Auth.Verify(strings.TrimSpace(tok))
	if errors.Is(err, auth.ErrRevoked) {
		return nil, errorf(http.StatusUnauthorized, "Authorization", "this token was revoked (swiftlane token revoke): ask an admin for a new one", "invalid token: %v", err)
	}
	if err != nil {
		return nil, errorf(http.StatusUnauthorized, "Authorization", "get a new token: it may have expired or be signed by another server", "invalid token: %v", err)
	}
	return c, nil
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// hub wakes watchers after every strategy write.
type hub struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
	gen  uint64 // notifications so far
}

// generation counts notifications: a change committed before a notify is
// in every store read started after the generation moved past it.
func (h *hub) generation() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gen
}

func (h *hub) subscribe() chan struct{} {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	return ch
}

func (h *hub) unsubscribe(ch chan struct{}) {
	h.mu.Lock()
	delete(h.subs, ch)
	h.mu.Unlock()
}

func (h *hub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

func (h *hub) notify() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gen++
	for ch := range h.subs {
		select {
		case ch <- struct{}{}:
		default: // already pending: the watcher reads every change since its last one
		}
	}
}

// Serve serves on ln until ctx ends, over TLS when cert is non-nil. Open
// watch streams are ended when ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener, cert *tls.Certificate) error {
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.o.Timeouts.ReadHeader,
		ReadTimeout:       s.o.Timeouts.Read,
		WriteTimeout:      s.o.Timeouts.Write,
		IdleTimeout:       s.o.Timeouts.Idle,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          slog.NewLogLogger(s.o.Log.Handler(), slog.LevelDebug),
	}
	if cert != nil {
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12}
		ln = tls.NewListener(ln, srv.TLSConfig)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	cancel() // ends watch streams so Shutdown does not wait for them
	sctx, scancel := context.WithTimeout(context.Background(), s.o.Timeouts.Shutdown)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	<-errc
	return nil
}

// nodeLabels are the labels an agent registered with (nil if unknown).
func (s *Server) nodeLabels(ctx context.Context, node string) map[string]string {
	n, err := s.o.Store.GetNode(ctx, node)
	if err != nil {
		return nil
	}
	return n.Labels
}

// forClaims filters strategies for an agent's node.
func (s *Server) forClaims(ctx context.Context, c *auth.Claims, list []apitypes.Strategy) []apitypes.Strategy {
	if c == nil || c.Role != auth.Agent {
		return list
	}
	labels := s.nodeLabels(ctx, c.Node)
	out := list[:0:0]
	for _, st := range list {
		if st.ForNode(labels) {
			out = append(out, st)
		}
	}
	return out
}

func sortNodes(ns []apitypes.Node) {
	sort.Slice(ns, func(i, j int) bool { return ns[i].Name < ns[j].Name })
}
