// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/swiftlane/swiftlane/internal/api"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/store"
	"github.com/swiftlane/swiftlane/internal/ui"
)

const defaultDataDir = "/var/lib/swiftlane"

func newAPICmd() *cobra.Command {
	var dataDir, listen, certFile, keyFile string
	var sans []string
	var insecureHTTP, debug bool
	cmd := &cobra.Command{
		Use:   "api",
		Short: "Serve the control plane: REST API, strategy watch, web UI",
		Long: `Serves strategies, nodes and tokens over HTTPS (a self-signed certificate is
generated in the data directory unless --tls-cert/--tls-key are given; plain
HTTP only with --insecure-http). On first start it generates the token signing
key and the bootstrap admin credential (printed once, kept in the data
directory with mode 0600). The web UI is at /, the API reference at
/openapi.json.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := newLogger(debug)
			a, bootstrap, err := auth.LoadOrCreate(dataDir)
			if err != nil {
				return fmt.Errorf("--data-dir %s: %w", dataDir, err)
			}
			st, err := store.Open(dataDir)
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
	return cmd
}
