// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
)

func newTokenCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Mint control-plane tokens"}
	var role, node, dataDir, subject string
	var ttl time.Duration
	var cf clientFlags
	create := &cobra.Command{
		Use:   "create",
		Short: "Print a new signed token (admin, viewer, or agent bound to --node)",
		Long: `Signs a token with the server's key. On the server's machine it reads the key
from --data-dir (root only: the key is mode 0600); elsewhere pass --server with
an admin token (--token-file or SWIFTLANE_TOKEN) to mint through the API.

  swiftlane token create --role agent --node n1 > /etc/swiftlane/agent.token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := auth.CheckRole(auth.Role(role), node); err != nil {
				return fmt.Errorf("--%w", err)
			}
			if ttl == 0 {
				ttl = 12 * time.Hour
				if auth.Role(role) == auth.Agent {
					ttl = 365 * 24 * time.Hour
				}
			}
			if subject == "" {
				subject = "cli"
			}
			if cmd.Flags().Changed("server") {
				c, err := cf.client()
				if err != nil {
					return err
				}
				t, err := c.CreateToken(cmd.Context(), apitypes.TokenRequest{Role: role, Node: node, TTLSeconds: int64(ttl / time.Second), Subject: subject})
				if err != nil {
					return err
				}
				fmt.Println(t.Token)
				return nil
			}
			a, err := auth.LoadSigner(dataDir)
			if err != nil {
				return err
			}
			tok, exp, err := a.Issue(subject, auth.Role(role), node, ttl)
			if err != nil {
				return fmt.Errorf("--%w", err)
			}
			fmt.Println(tok)
			id, _, _ := a.TokenID(tok)
			fmt.Fprintf(os.Stderr, "swiftlane: %s token %s, expires %s (revoke: swiftlane token revoke %s)\n", role, id, exp.UTC().Format(time.RFC3339), id)
			return nil
		},
	}
	f := create.Flags()
	f.StringVar(&role, "role", "", "admin, viewer or agent")
	f.StringVar(&node, "node", "", "node the agent token is bound to")
	f.DurationVar(&ttl, "ttl", 0, "lifetime (default 12h; 8760h for agents)")
	f.StringVar(&subject, "subject", "", "who the token is for (shows in logs)")
	f.StringVar(&dataDir, "data-dir", defaultDataDir, "the server's data directory (holds the signing key)")
	cf.add(create)
	cmd.AddCommand(create, newTokenRevokeCmd())
	return cmd
}

func newTokenRevokeCmd() *cobra.Command {
	var dataDir string
	var cf clientFlags
	revoke := &cobra.Command{
		Use:   "revoke ID|TOKEN",
		Short: "Put a token on the deny list: the server refuses it from the next request on",
		Long: `Revokes a token by its id (printed by 'swiftlane token create', or the
token's jti claim) or by the token itself. On the server's machine it writes
the deny list in --data-dir (the running server picks it up at once);
elsewhere pass --server with an admin token. The entry is kept until the
token would have expired.

  swiftlane token revoke 3q2-7wEVmK9xC1aB
  swiftlane token revoke "$(cat leaked.token)" --server https://api.example:8443`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			arg := strings.TrimSpace(args[0])
			req := apitypes.RevokeRequest{ID: arg}
			if strings.Count(arg, ".") == 2 {
				req = apitypes.RevokeRequest{Token: arg}
			}
			if cmd.Flags().Changed("server") {
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
			a, err := auth.LoadSigner(dataDir)
			if err != nil {
				return err
			}
			id, exp := req.ID, time.Time{}
			if req.Token != "" {
				if id, exp, err = a.TokenID(req.Token); err != nil {
					return err
				}
			}
			if err := a.Revoke(id, exp); err != nil {
				return err
			}
			fmt.Printf("token %s revoked in %s\n", id, filepath.Join(dataDir, auth.DenyFile))
			return nil
		},
	}
	revoke.Flags().StringVar(&dataDir, "data-dir", defaultDataDir, "the server's data directory (holds the signing key and the deny list)")
	cf.add(revoke)
	return revoke
}
