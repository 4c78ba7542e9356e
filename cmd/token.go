// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/swiftlane/swiftlane/internal/apiserver"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/kubeenv"
	"github.com/swiftlane/swiftlane/internal/store"
)

func newTokenCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Mint control-plane tokens"}
	var role, node, dataDir, subject string
	var ttl time.Duration
	var cf clientFlags
	var sf storeFlags
	create := &cobra.Command{
		Use:   "create",
		Short: "Print a new signed token (admin, viewer, or agent bound to --node)",
		Long: `Signs a token with the server's key. On the server's machine it reads the key
from --data-dir (root only: the key is mode 0600); elsewhere pass --server with
an admin token (--token-file or SWIFTLANE_TOKEN) to mint through the API.

Through the API the server records the token in its audit history. Signed
here, no server sees it: --store records it in the store's history (kubernetes
in the API's pod; bolt in --data-dir while no server holds it); without
--store the command says the token is not recorded.

  swiftlane token create --role agent --node n1 > /etc/swiftlane/agent.token
  kubectl -n swiftlane-system exec deploy/swiftlane-api -- swiftlane token create --data-dir /var/lib/swiftlane --store kubernetes --role viewer`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := auth.CheckRole(auth.Role(role), node); err != nil {
				return fmt.Errorf("--%w", err)
			}
			if ttl == 0 {
				ttl = 12 * time.Hour
				if auth.Role(role) == auth.Agent {
					ttl = auth.DefaultAgentTTL
				}
			}
			if subject == "" {
				subject = "cli"
			}
			if cmd.Flags().Changed("server") {
				if err := sf.notWithServer(cmd); err != nil {
					return err
				}
				c, err := cf.client()
				if err != nil {
					return err
				}
				t, err := c.CreateToken(cmd.Context(), apitypes.TokenRequest{Role: role, Node: node, TTLSeconds: int64(ttl / time.Second), Subject: subject})
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), t.Token)
				return nil
			}
			a, err := auth.LoadSigner(dataDir)
			if err != nil {
				return err
			}
			var st store.Store
			if sf.kind != "" { // opened first: no token if it cannot be recorded
				if st, err = sf.open(cmd, dataDir); err != nil {
					return err
				}
				defer st.Close()
			}
			tok, exp, err := a.Issue(subject, auth.Role(role), node, ttl)
			if err != nil {
				return fmt.Errorf("--%w", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			id, _, _ := a.TokenID(tok)
			stderr := cmd.ErrOrStderr()
			fmt.Fprintf(stderr, "swiftlane: %s token %s, expires %s (revoke: swiftlane token revoke %s)\n", role, id, exp.UTC().Format(time.RFC3339), id)
			if st == nil {
				fmt.Fprintf(stderr, "swiftlane: token %s is in no audit history (signed here, no server saw it): mint through the server (--server), or add --store kubernetes (in the API's pod) or --store bolt to record it\n", id)
				return nil
			}
			what := role + " token"
			if node != "" {
				what += " for node " + node
			}
			if err := recordLocal(cmd, st, apitypes.AuditTokenIssue, id, fmt.Sprintf("swiftlane token create --store %s: %s, subject %s, expires %s",
				sf.kind, what, subject, exp.UTC().Format(time.RFC3339))); err != nil {
				fmt.Fprintf(stderr, "swiftlane: the token is signed, but the audit history did not take the entry: %v\n", err)
			}
			return nil
		},
	}
	f := create.Flags()
	f.StringVar(&role, "role", "", "admin, viewer or agent")
	f.StringVar(&node, "node", "", "node the agent token is bound to")
	f.DurationVar(&ttl, "ttl", 0, "lifetime (default 12h; 24h for agents, which renew theirs)")
	f.StringVar(&subject, "subject", "", "who the token is for (shows in logs)")
	f.StringVar(&dataDir, "data-dir", defaultDataDir, "the server's data directory (holds the signing key)")
	sf.add(create, "", "without --server: record the token in this store's audit history, bolt (in --data-dir) or kubernetes (default: not recorded)")
	cf.add(create)
	cmd.AddCommand(create, newTokenRevokeCmd())
	return cmd
}

func newTokenRevokeCmd() *cobra.Command {
	var dataDir string
	var cf clientFlags
	var sf storeFlags
	revoke := &cobra.Command{
		Use:   "revoke ID|TOKEN",
		Short: "Put a token on the deny list: every API replica refuses it from then on",
		Long: `Revokes a token by its id (printed by 'swiftlane token create', or the
token's jti claim) or by the token itself. The deny list lives in the
control plane's store, so every replica refuses the token (within a second
on the Kubernetes store). With --server it revokes through the API (an admin
token); otherwise it writes the store itself: --store kubernetes (the
TokenRevocation objects in --namespace, e.g. inside the API's pod), or the
bolt file in --data-dir while no server holds it. A whole token is checked
against the signing key in --data-dir. The entry is kept until the token
would have expired.

  swiftlane token revoke 3f9c1a0b2d4e5f60718293a4 --server https://api.example:8443
  kubectl -n swiftlane-system exec deploy/swiftlane-api -- swiftlane token revoke --store kubernetes 3f9c1a0b2d4e5f60718293a4`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			arg := strings.TrimSpace(args[0])
			req := apitypes.RevokeRequest{ID: arg}
			if strings.Count(arg, ".") == 2 {
				req = apitypes.RevokeRequest{Token: arg}
			}
			if cmd.Flags().Changed("server") {
				if err := sf.notWithServer(cmd); err != nil {
					return err
				}
				c, err := cf.client()
				if err != nil {
					return err
				}
				r, err := c.RevokeToken(cmd.Context(), req)
				if err != nil {
					return err
				}
				fmt.Printf("token %s revoked (deny list entry until %s)\n", r.ID, r.Until.Format(time.RFC3339))
				return nil
			}
			id, exp := req.ID, time.Time{}
			if req.Token != "" {
				a, err := auth.LoadSigner(dataDir)
				if err != nil {
					return err
				}
				if id, exp, err = a.TokenID(req.Token); err != nil {
					return err
				}
			}
			st, err := sf.open(cmd, dataDir)
			if err != nil {
				return err
			}
			defer st.Close()
			until, err := auth.Revoke(cmd.Context(), st, id, exp, "cli", time.Now())
			if err != nil {
				return err
			}
			if err := recordLocal(cmd, st, apitypes.AuditTokenRevoke, id, fmt.Sprintf("swiftlane token revoke --store %s; on the deny list until %s",
				sf.kind, until.UTC().Format(time.RFC3339))); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "swiftlane: the token is revoked, but the audit history did not take the entry: %v\n", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "token %s revoked in the %s store (deny list entry until %s)\n", id, sf.kind, until.Format(time.RFC3339))
			return nil
		},
	}
	f := revoke.Flags()
	f.StringVar(&dataDir, "data-dir", defaultDataDir, "the server's data directory (the signing key, and the bolt store)")
	sf.add(revoke, "bolt", "without --server: the store to write, bolt (in --data-dir) or kubernetes")
	cf.add(revoke)
	return revoke
}

// storeFlags name the store a token command writes itself, without --server.
type storeFlags struct{ kind, kubeconfig, namespace string }

func (s *storeFlags) add(cmd *cobra.Command, kind, doc string) {
	f := cmd.Flags()
	f.StringVar(&s.kind, "store", kind, doc)
	f.StringVar(&s.kubeconfig, "kubeconfig", "", "kubeconfig for --store kubernetes (default: the pod's service account, else $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&s.namespace, "namespace", "", "namespace of the API's objects for --store kubernetes (default: the pod's namespace, else "+kubeenv.DefaultNamespace+")")
}

// notWithServer refuses the store flags beside --server: the API writes.
func (s *storeFlags) notWithServer(cmd *cobra.Command) error {
	f := cmd.Flags()
	if f.Changed("store") || f.Changed("kubeconfig") || f.Changed("namespace") {
		return errors.New("--store, --kubeconfig and --namespace write the store directly; drop them with --server")
	}
	return nil
}

func (s *storeFlags) open(cmd *cobra.Command, dataDir string) (store.Store, error) {
	st, err := apiserver.OpenStore(cmd.Context(), s.kind, dataDir, s.kubeconfig, s.namespace, 0, slog.New(slog.DiscardHandler))
	if err != nil && s.kind == "bolt" {
		return nil, fmt.Errorf("%w\nwhile a server holds the store, go through it: swiftlane token %s --server URL (admin token in --token-file or $SWIFTLANE_TOKEN)", err, cmd.Name())
	}
	return st, err
}

// recordLocal puts a change this command made in the store's audit
// history: it did not go through the API, so no server records it.
func recordLocal(cmd *cobra.Command, st store.Store, op, id, detail string) error {
	host, _ := os.Hostname()
	_, err := st.AppendAudit(cmd.Context(), apitypes.AuditEntry{Time: time.Now().UTC(), Subject: "cli:" + osUser(), Role: apitypes.RoleLocal,
		Operation: op, Object: apitypes.AuditObject{Kind: "token", Name: id}, Outcome: apitypes.AuditOK, Detail: detail, Server: host})
	return err
}

// osUser names who ran the command, for the audit history.
func osUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return strconv.Itoa(os.Getuid())
}
