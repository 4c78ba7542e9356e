// SPDX-License-Identifier: Apache-2.0

// Package apiserver assembles `swiftlane api` from its configuration: the
// signing key and first-start credential, the store, default strategies,
// TLS and the listener around internal/api's server.
package apiserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/swiftlane/swiftlane/internal/api"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/config"
	"github.com/swiftlane/swiftlane/internal/kubeenv"
	"github.com/swiftlane/swiftlane/internal/store"
	"github.com/swiftlane/swiftlane/internal/store/crdstore"
	"github.com/swiftlane/swiftlane/internal/ui"
)

// Run serves the control plane as cfg says until ctx ends. What an operator
// must see once (the first start's admin credential, where the server
// listens, the certificate to trust) goes to stderr.
func Run(ctx context.Context, cfg config.APIServer, log *slog.Logger, version string) error {
	a, bootstrap, err := auth.LoadOrCreateKey(cfg.DataDir, cfg.Tokens.SigningKey)
	if err != nil {
		return fmt.Errorf("data_dir %s: %w", cfg.DataDir, err)
	}
	st, err := OpenStore(ctx, cfg.Store.Kind, cfg.DataDir, cfg.Store.Kubeconfig, cfg.Store.Namespace, cfg.Audit.MaxEntries, log)
	if err != nil {
		return err
	}
	defer st.Close()
	// Revocations moved from a file in the data directory into the store.
	if found, n, expired, err := auth.ImportDenyFile(ctx, cfg.DataDir, st, time.Now()); err != nil {
		return fmt.Errorf("data_dir %s: %w", cfg.DataDir, err)
	} else if found {
		log.Info("imported the old deny list into the store; the file is no longer read or written: delete it",
			"file", filepath.Join(cfg.DataDir, auth.DenyFile), "revocations", n, "expired", expired)
	}
	defaults := make([]apitypes.Strategy, len(cfg.DefaultStrategies))
	for i, s := range cfg.DefaultStrategies {
		defaults[i] = apitypes.Strategy{Strategy: s}
	}
	created, err := api.EnsureStrategies(ctx, st, defaults)
	if err != nil {
		return err
	}
	if len(created) > 0 {
		log.Info("created default strategies", "names", created)
	}
	t := cfg.Timeouts
	srv, err := api.New(api.Options{Store: st, Auth: a, Log: log, Version: version, UI: ui.Handler(),
		KeepAlive: t.WatchKeepalive, LoginTTL: cfg.Tokens.LoginTTL, AgentTTL: cfg.Tokens.AgentTTL, TokenTTL: cfg.Tokens.TTL,
		Timeouts: api.Timeouts{ReadHeader: t.ReadHeader, Read: t.Read, Write: t.Write, Idle: t.Idle, Shutdown: t.Shutdown}})
	if err != nil {
		return err
	}
	cert, err := certificate(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	if bootstrap != "" {
		fmt.Fprintf(os.Stderr, "swiftlane: first start: admin credential (user %q), shown only now and kept in %s (mode 0600):\n\n    %s\n\n",
			auth.AdminUser, filepath.Join(cfg.DataDir, auth.CredentialFile), bootstrap)
	}
	scheme := "http"
	if cert != nil {
		scheme = "https"
	}
	fmt.Fprintf(os.Stderr, "swiftlane: control plane on %s://%s (UI /, API reference /openapi.json)\n", scheme, ln.Addr())
	if cert != nil && cfg.TLS.Cert == "" {
		fmt.Fprintf(os.Stderr, "swiftlane: clients trust it with --ca-file %s\n", filepath.Join(cfg.DataDir, auth.CertFile))
	}
	return srv.Serve(ctx, ln, cert)
}

// certificate is the server's TLS certificate: tls.cert/tls.key, else one
// generated in the data directory; nil for plain HTTP.
func certificate(cfg config.APIServer) (*tls.Certificate, error) {
	switch {
	case cfg.TLS.InsecureHTTP:
		fmt.Fprintln(os.Stderr, "swiftlane: WARNING: plain HTTP (insecure_http): tokens cross the network in clear text")
		return nil, nil
	case cfg.TLS.Cert != "":
		c, err := tls.LoadX509KeyPair(cfg.TLS.Cert, cfg.TLS.Key)
		if err != nil {
			return nil, fmt.Errorf("tls.cert/tls.key (--tls-cert/--tls-key): %w", err)
		}
		return &c, nil
	default:
		c, err := auth.LoadOrCreateCert(cfg.DataDir, cfg.TLS.SANs)
		if err != nil {
			return nil, err
		}
		return &c, nil
	}
}

// OpenStore opens the store of kind (bolt or kubernetes, as --store);
// auditSize bounds its audit history (0: the default).
func OpenStore(ctx context.Context, kind, dataDir, kubeconfig, namespace string, auditSize int, log *slog.Logger) (store.Store, error) {
	switch kind {
	case "bolt":
		if kubeconfig != "" || namespace != "" {
			return nil, errors.New("--kubeconfig and --namespace are for --store kubernetes; drop them or add --store kubernetes")
		}
		return store.OpenWith(dataDir, store.Options{AuditSize: auditSize})
	case "kubernetes":
	default:
		return nil, fmt.Errorf("--store %q is unknown: use bolt or kubernetes", kind)
	}
	cfg, err := kubeenv.Config(kubeconfig)
	if err != nil {
		return nil, err
	}
	if namespace == "" {
		namespace = kubeenv.PodNamespace()
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := crdstore.Open(ctx, crdstore.Options{Config: cfg, Namespace: namespace, AuditSize: auditSize, Log: log})
	if err != nil {
		return nil, fmt.Errorf("--store kubernetes (server %s, --namespace %s): %w", cfg.Host, namespace, err)
	}
	return st, nil
}
