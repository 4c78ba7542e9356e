// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/swiftlane/swiftlane/internal/api"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/config"
	"github.com/swiftlane/swiftlane/internal/store"
	"github.com/swiftlane/swiftlane/internal/store/crdstore"
	"github.com/swiftlane/swiftlane/internal/ui"
)

const defaultDataDir = "/var/lib/swiftlane"

func newAPICmd() *cobra.Command {
	var cfgPath, dataDir, listen, certFile, keyFile string
	var sans []string
	var insecureHTTP, debug bool
	var storeKind, kubeconfig, namespace string
	var auditMax int
	cmd := &cobra.Command{
		Use:   "api",
		Short: "Serve the control plane: REST API, strategy watch, web UI",
		Long: `Serves strategies, nodes and tokens over HTTPS (a self-signed certificate is
generated in the data directory unless --tls-cert/--tls-key are given; plain
HTTP only with --insecure-http). On first start it generates the token signing
key and the bootstrap admin credential (printed once, kept in the data
directory with mode 0600). The web UI is at /, the API reference at
/openapi.json.

Strategies and nodes are kept in --data-dir (--store bolt, one process), or
as SchedulingStrategy objects in --namespace and cluster-scoped
SchedulingNode objects (--store kubernetes: replicas share them, and
strategies applied with kubectl show up in the API; install the CRDs from
deploy/helm/swiftlane/crds first). The data directory still holds the
signing key, the admin credential and the certificate.

--config FILE (YAML) sets all of that plus server timeouts, log level and
format, token lifetimes, the signing key's path and default strategies
(docs/control.md lists the keys); flags given override the file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := config.DefaultAPIServer()
			if cfgPath != "" {
				var err error
				if cfg, err = config.LoadAPIServer(cfgPath); err != nil {
					return err
				}
			}
			// Flags given on the command line win over the file.
			f := cmd.Flags()
			set := func(name string, apply func()) {
				if f.Changed(name) {
					apply()
				}
			}
			set("data-dir", func() { cfg.DataDir = dataDir })
			set("listen", func() { cfg.Listen = listen })
			set("tls-cert", func() { cfg.TLS.Cert = certFile })
			set("tls-key", func() { cfg.TLS.Key = keyFile })
			set("tls-san", func() { cfg.TLS.SANs = sans })
			set("insecure-http", func() { cfg.TLS.InsecureHTTP = insecureHTTP })
			set("debug", func() {
				if debug {
					cfg.Log.Level = "debug"
				}
			})
			set("store", func() { cfg.Store.Kind = storeKind })
			set("kubeconfig", func() { cfg.Store.Kubeconfig = kubeconfig })
			set("namespace", func() { cfg.Store.Namespace = namespace })
			set("audit-max-entries", func() { cfg.Audit.MaxEntries = auditMax })
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("flags: %w", err)
			}
			return runAPI(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfgPath, "config", "", "YAML config file (docs/control.md); flags override it")
	f.StringVar(&dataDir, "data-dir", defaultDataDir, "state: database (strategies, nodes, the token deny list), signing key, admin credential, TLS certificate")
	f.StringVar(&listen, "listen", config.DefaultListen, "address to serve on")
	f.StringVar(&certFile, "tls-cert", "", "TLS certificate (PEM) instead of the generated one")
	f.StringVar(&keyFile, "tls-key", "", "TLS private key (PEM) for --tls-cert")
	f.StringSliceVar(&sans, "tls-san", nil, "extra host names or IPs for the generated certificate")
	f.BoolVar(&insecureHTTP, "insecure-http", false, "serve plain HTTP (only for tests or behind a TLS proxy)")
	f.BoolVar(&debug, "debug", false, "verbose logging (log.level: debug)")
	f.StringVar(&storeKind, "store", "bolt", "where strategies and nodes live: bolt (a file in --data-dir) or kubernetes (SchedulingStrategy and SchedulingNode objects)")
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig for --store kubernetes (default: the pod's service account, else $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&namespace, "namespace", "", "namespace of the strategies for --store kubernetes (default: the pod's namespace, else "+defaultNamespace+")")
	f.IntVar(&auditMax, "audit-max-entries", apitypes.DefaultAuditSize, "entries the audit history keeps (GET /api/v2/audit); the oldest are dropped first")
	return cmd
}

// runAPI serves the control plane as cfg says until ctx ends.
func runAPI(ctx context.Context, cfg config.APIServer) error {
	log := newLoggerFormat(cfg.Log.Level, cfg.Log.Format)
	a, bootstrap, err := auth.LoadOrCreateKey(cfg.DataDir, cfg.Tokens.SigningKey)
	if err != nil {
		return fmt.Errorf("data_dir %s: %w", cfg.DataDir, err)
	}
	st, err := openStore(ctx, cfg.Store.Kind, cfg.DataDir, cfg.Store.Kubeconfig, cfg.Store.Namespace, cfg.Audit.MaxEntries, log)
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
	var cert *tls.Certificate
	scheme := "http"
	switch {
	case cfg.TLS.InsecureHTTP:
		fmt.Fprintln(os.Stderr, "swiftlane: WARNING: plain HTTP (insecure_http): tokens cross the network in clear text")
	case cfg.TLS.Cert != "":
		c, err := tls.LoadX509KeyPair(cfg.TLS.Cert, cfg.TLS.Key)
		if err != nil {
			return fmt.Errorf("tls.cert/tls.key (--tls-cert/--tls-key): %w", err)
		}
		cert, scheme = &c, "https"
	default:
		c, err := auth.LoadOrCreateCert(cfg.DataDir, cfg.TLS.SANs)
		if err != nil {
			return err
		}
		cert, scheme = &c, "https"
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	if bootstrap != "" {
		fmt.Fprintf(os.Stderr, "swiftlane: first start: admin credential (user %q), shown only now and kept in %s (mode 0600):\n\n    %s\n\n",
			auth.AdminUser, filepath.Join(cfg.DataDir, auth.CredentialFile), bootstrap)
	}
	fmt.Fprintf(os.Stderr, "swiftlane: control plane on %s://%s (UI /, API reference /openapi.json)\n", scheme, ln.Addr())
	if cert != nil && cfg.TLS.Cert == "" {
		fmt.Fprintf(os.Stderr, "swiftlane: clients trust it with --ca-file %s\n", filepath.Join(cfg.DataDir, auth.CertFile))
	}
	return srv.Serve(ctx, ln, cert)
}

const (
	defaultNamespace = "swiftlane-system"
	podNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
)

// openStore opens the --store backend; auditSize bounds its audit history
// (0: the default).
func openStore(ctx context.Context, kind, dataDir, kubeconfig, namespace string, auditSize int, log *slog.Logger) (store.Store, error) {
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
	cfg, err := kubeConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	if namespace == "" {
		namespace = defaultNamespace
		if b, err := os.ReadFile(podNamespaceFile); err == nil && strings.TrimSpace(string(b)) != "" {
			namespace = strings.TrimSpace(string(b))
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := crdstore.Open(ctx, crdstore.Options{Config: cfg, Namespace: namespace, AuditSize: auditSize, Log: log})
	if err != nil {
		return nil, fmt.Errorf("--store kubernetes (server %s, --namespace %s): %w", cfg.Host, namespace, err)
	}
	return st, nil
}

// kubeConfig is --kubeconfig, else the in-cluster service account, else
// kubectl's rules ($KUBECONFIG, then ~/.kube/config).
func kubeConfig(path string) (*rest.Config, error) {
	if path != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", path, err)
		}
		return cfg, nil
	}
	if cfg, err := rest.InClusterConfig(); err == nil {
		return cfg, nil
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no Kubernetes API server: not in a pod and no kubeconfig (%v): pass --kubeconfig or set KUBECONFIG", err)
	}
	return cfg, nil
}
