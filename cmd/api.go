// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/swiftlane/swiftlane/internal/apiserver"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/config"
	"github.com/swiftlane/swiftlane/internal/kubeenv"
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
			return apiserver.Run(cmd.Context(), cfg, newLoggerFormat(cfg.Log.Level, cfg.Log.Format), version)
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
	f.StringVar(&namespace, "namespace", "", "namespace of the strategies for --store kubernetes (default: the pod's namespace, else "+kubeenv.DefaultNamespace+")")
	f.IntVar(&auditMax, "audit-max-entries", apitypes.DefaultAuditSize, "entries the audit history keeps (GET /api/v2/audit); the oldest are dropped first")
	return cmd
}
