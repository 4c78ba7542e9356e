// SPDX-License-Identifier: Apache-2.0

package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/apiclient"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/store"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// testServer is a real server on a loopback port over a real data dir.
type testServer struct {
	t         *testing.T
	dir, addr string
	url       string
	bootstrap string
	auth      *auth.Authority
	store     store.Store
	srv       *Server
	tls       *tls.Config // client side, trusting the generated cert
	stop      func()
}

type serverOpt struct {
	backend backend // default bolt
	logSize int
	tls     bool
	addr    string
	// timeouts and keepAlive go to Options.
	timeouts  Timeouts
	keepAlive time.Duration
	log       *slog.Logger
}

// backend is a store the API tests run on; eachStore runs a test once per
// backend.
type backend struct {
	name string
	// open opens the store of a server whose data directory is dir; after a
	// restart, the same dir opens the same state.
	open func(t *testing.T, dir string, logSize int) store.Store
}

var boltBackend = backend{name: "bolt", open: func(t *testing.T, dir string, logSize int) store.Store {
	st, err := store.OpenWithLogSize(dir, logSize)
	if err != nil {
		t.Fatal(err)
	}
	return st
}}

// eachStore runs test on the embedded store and on the Kubernetes one (which
// skips without a kube-apiserver: see kubeBackend).
func eachStore(t *testing.T, test func(t *testing.T, b backend)) {
	for _, b := range []backend{boltBackend, kubeBackend} {
		t.Run(b.name, func(t *testing.T) { test(t, b) })
	}
}

func startServer(t *testing.T, dir string, o serverOpt) *testServer {
	t.Helper()
	a, boot, err := auth.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if o.logSize == 0 {
		o.logSize = store.DefaultLogSize
	}
	if o.backend.open == nil {
		o.backend = boltBackend
	}
	st := o.backend.open(t, dir, o.logSize)
	srv, err := New(Options{Store: st, Auth: a, Version: "test", MaxBody: 64 << 10, Timeouts: o.timeouts, KeepAlive: o.keepAlive, Log: o.log})
	if err != nil {
		t.Fatal(err)
	}
	if o.addr == "" {
		o.addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{t: t, dir: dir, addr: ln.Addr().String(), bootstrap: boot, auth: a, store: st, srv: srv}
	var cert *tls.Certificate
	scheme := "http"
	if o.tls {
		c, err := auth.LoadOrCreateCert(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		cert, scheme = &c, "https"
		if ts.tls, err = auth.ClientTLS(filepath.Join(dir, auth.CertFile)); err != nil {
			t.Fatal(err)
		}
	}
	ts.url = scheme + "://" + ts.addr
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln, cert) }()
	stopped := false
	ts.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		st.Close()
	}
	t.Cleanup(ts.stop)
	return ts
}

func (ts *testServer) token(role auth.Role, node string) string {
	ts.t.Helper()
	tok, _, err := ts.auth.Issue("test", role, node, time.Hour)
	if err != nil {
		ts.t.Fatal(err)
	}
	return tok
}

func (ts *testServer) client(token string) *apiclient.Client {
	return apiclient.NewClient(ts.url, token, ts.tls)
}

// raw sends a request and returns the status and the body (streams are cut
// after the headers).
func (ts *testServer) raw(method, path, token, body string) (int, []byte) {
	ts.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequestWithContext(ctx, method, ts.url+path, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	tr := &http.Transport{TLSClientConfig: ts.tls}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		ts.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return resp.StatusCode, nil
	}
	var b bytes.Buffer
	_, _ = io.Copy(&b, resp.Body)
	return resp.StatusCode, b.Bytes()
}

func critical(name, re string) apitypes.Strategy {
	c := strategy.Critical
	return apitypes.Strategy{Strategy: strategy.Strategy{Name: name, Class: &c, CommandRegex: re}}
}

func bg() context.Context { return context.Background() }
