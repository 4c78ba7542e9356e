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
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/store"
	"github.com/swiftlane/swiftlane/internal/store/crdstore"
	"github.com/swiftlane/swiftlane/internal/ui"
)

const defaultDataDir = "/var/lib/swiftlane"

func newAPICmd() *cobra.Command {
	var dataDir, listen, certFile, keyFile string
	var sans []string
	var insecureHTTP, debug bool
	var storeKind, kubeconfig, namespace string
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
signing key, the admin credential and the certificate.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := newLogger(debug)
			a, bootstrap, err := auth.LoadOrCreate(dataDir)
			if err != nil {
				return fmt.Errorf("--data-dir %s: %w", dataDir, err)
			}
			st, err := openStore(cmd.Context(), storeKind, dataDir, kubeconfig, namespace, log)
			if err != nil {
				return err
			}
			defer st.Close()
			srv, err := api.New(api.Options{Store: st, Auth: a, Log: log, Version: version, UI: ui.Handler()})
			if err != nil {
				return err
			}
			var cert *tls.Certificate
			scheme := "http"
			switch {
			case insecureHTTP:
				fmt.Fprintln(os.Stderr, "swiftlane: WARNING: plain HTTP (--insecure-http): tokens cross the network in clear text")
			case certFile != "" || keyFile != "":
				c, err := tls.LoadX509KeyPair(certFile, keyFile)
				if err != nil {
					return fmt.Errorf("--tls-cert/--tls-key: %w", err)
				}
				cert, scheme = &c, "https"
			default:
				c, err := auth.LoadOrCreateCert(dataDir, sans)
				if err != nil {
					return err
				}
				cert, scheme = &c, "https"
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("--listen %s: %w", listen, err)
			}
			if bootstrap != "" {
				fmt.Fprintf(os.Stderr, "swiftlane: first start: admin credential (user %q), shown only now and kept in %s (mode 0600):\n\n    %s\n\n",
					auth.AdminUser, filepath.Join(dataDir, auth.CredentialFile), bootstrap)
			}
			fmt.Fprintf(os.Stderr, "swiftlane: control plane on %s://%s (UI /, API reference /openapi.json)\n", scheme, ln.Addr())
			if cert != nil && certFile == "" {
				fmt.Fprintf(os.Stderr, "swiftlane: clients trust it with --ca-file %s\n", filepath.Join(dataDir, auth.CertFile))
			}
			return srv.Serve(cmd.Context(), ln, cert)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", defaultDataDir, "state: database, signing key, admin credential, TLS certificate")
	f.StringVar(&listen, "listen", "127.0.0.1:8443", "address to serve on")
	f.StringVar(&certFile, "tls-cert", "", "TLS certificate (PEM) instead of the generated one")
	f.StringVar(&keyFile, "tls-key", "", "TLS private key (PEM) for --tls-cert")
	f.StringSliceVar(&sans, "tls-san", nil, "extra host names or IPs for the generated certificate")
	f.BoolVar(&insecureHTTP, "insecure-http", false, "serve plain HTTP (only for tests or behind a TLS proxy)")
	f.BoolVar(&debug, "debug", false, "verbose logging")
	f.StringVar(&storeKind, "store", "bolt", "where strategies and nodes live: bolt (a file in --data-dir) or kubernetes (SchedulingStrategy and SchedulingNode objects)")
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig for --store kubernetes (default: the pod's service account, else $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&namespace, "namespace", "", "namespace of the strategies for --store kubernetes (default: the pod's namespace, else "+defaultNamespace+")")
	return cmd
}

const (
	defaultNamespace = "swiftlane-system"
	podNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
)

// openStore opens the --store backend.
func openStore(ctx context.Context, kind, dataDir, kubeconfig, namespace string, log *slog.Logger) (store.Store, error) {
	switch kind {
	case "bolt":
		if kubeconfig != "" || namespace != "" {
			return nil, errors.New("--kubeconfig and --namespace are for --store kubernetes; drop them or add --store kubernetes")
		}
		return store.Open(dataDir)
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
	st, err := crdstore.Open(ctx, crdstore.Options{Config: cfg, Namespace: namespace, Log: log})
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
