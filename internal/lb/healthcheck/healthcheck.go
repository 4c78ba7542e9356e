// SPDX-License-Identifier: Apache-2.0

// Package healthcheck answers cloud load balancers' health checks for
// Services with externalTrafficPolicy Local, as kube-proxy does. Such a
// Service keeps the client's address by sending external traffic only to
// endpoints on the node that received it, so a node without one drops it;
// its healthCheckNodePort tells the load balancer which nodes to use. Per
// Service, this node serves HTTP on that port: 200 while it has a ready
// local endpoint, 503 while it has none (or only terminating ones, so the
// load balancer drains it during a rollout), with kube-proxy's JSON body.
//
// A Server is safe for concurrent use.
package healthcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/swiftlane/swiftlane/internal/lb/services"
)

// Options configure a Server.
type Options struct {
	// Host is the address the ports listen on; empty: every address of the
	// node, as kube-proxy without --nodeport-addresses.
	Host string
	Log  *slog.Logger
}

// Server holds one listener per Service with a health check node port.
type Server struct {
	o Options

	mu      sync.Mutex
	checks  map[string]*check // by services.Service name
	healthy bool              // the last apply succeeded
}

type check struct {
	port      uint16
	namespace string
	name      string
	local     int // ready local endpoints, under Server.mu
	srv       *http.Server
	ln        net.Listener
}

// close stops serving. The listener is closed here, not left to Serve's
// goroutine, so the port is free when close returns.
func (c *check) close() error {
	err := c.srv.Close()
	if lerr := c.ln.Close(); lerr != nil && !errors.Is(lerr, net.ErrClosed) {
		err = errors.Join(err, lerr)
	}
	return err
}

// New returns a Server with no ports open; Sync opens them.
func New(o Options) *Server {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Server{o: o, checks: map[string]*check{}}
}

// SetProxyHealthy records whether the data path holds the latest Services
// (the last apply succeeded). While it does not, every port answers 503, as
// kube-proxy's do while its rules are stale: this node may not serve what
// the load balancer expects.
func (s *Server) SetProxyHealthy(ok bool) {
	s.mu.Lock()
	s.healthy = ok
	s.mu.Unlock()
}

// Sync makes the open ports those of cfg's Services (externalTrafficPolicy
// Local with a healthCheckNodePort) and their answers current. A Service
// whose port changed is closed and opened on the new one; one that is gone
// is closed. A port that cannot be opened is reported in the error, the
// others are served, and the next Sync tries it again.
func (s *Server) Sync(cfg *services.Config) error {
	type target struct {
		port  uint16
		local int
	}
	want := map[string]target{}
	for _, sv := range cfg.Services {
		if sv.HealthCheckNodePort != 0 && sv.ExternalTrafficPolicy == services.PolicyLocal {
			want[sv.Name] = target{sv.HealthCheckNodePort, cfg.LocalReadyEndpoints(sv)}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Close first, so a port that moves between Services is free again.
	for name, c := range s.checks {
		if w, ok := want[name]; !ok || w.port != c.port {
			c.close()
			delete(s.checks, name)
			s.o.Log.Info("health check node port closed", "service", name, "port", c.port)
		}
	}
	var errs []error
	for name, w := range want {
		c := s.checks[name]
		if c == nil {
			var err error
			if c, err = s.open(name, w.port); err != nil {
				errs = append(errs, err)
				continue
			}
			s.checks[name] = c
		}
		c.local = w.local
	}
	return errors.Join(errs...)
}

// open starts serving name's health check on port. Called with s.mu held.
func (s *Server) open(name string, port uint16) (*check, error) {
	addr := net.JoinHostPort(s.o.Host, strconv.Itoa(int(port)))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("service %s: healthCheckNodePort %d: %w (another process holds the port?)", name, port, err)
	}
	c := &check{port: port, ln: ln}
	// namespace/name, without the :ports suffix of a Service split by port.
	c.namespace, c.name, _ = strings.Cut(name, "/")
	if c.name == "" {
		c.namespace, c.name = "", name
	}
	c.name, _, _ = strings.Cut(c.name, ":")
	c.srv = &http.Server{Handler: s.handler(c), ReadHeaderTimeout: 5 * time.Second}
	go c.srv.Serve(ln)
	s.o.Log.Info("health check node port open", "service", name, "addr", ln.Addr().String())
	return c, nil
}

// Answer is the JSON body of a health check, kube-proxy's fields.
type Answer struct {
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints      int  `json:"localEndpoints"`
	ServiceProxyHealthy bool `json:"serviceProxyHealthy"`
}

// handler answers any path and method, as kube-proxy does (load balancers
// differ in what they ask for).
func (s *Server) handler(c *check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		var a Answer
		s.mu.Lock()
		a.Service.Namespace, a.Service.Name = c.namespace, c.name
		a.LocalEndpoints, a.ServiceProxyHealthy = c.local, s.healthy
		s.mu.Unlock()
		body, _ := json.MarshalIndent(a, "", "\t")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if a.LocalEndpoints > 0 && a.ServiceProxyHealthy {
			w.WriteHeader(http.StatusOK)
		} else {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		w.Write(body)
	})
}

// Ports lists the open ports by Service name.
func (s *Server) Ports() map[string]uint16 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]uint16, len(s.checks))
	for name, c := range s.checks {
		out[name] = c.port
	}
	return out
}

// Close closes every port.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for name, c := range s.checks {
		errs = append(errs, c.close())
		delete(s.checks, name)
	}
	return errors.Join(errs...)
}
