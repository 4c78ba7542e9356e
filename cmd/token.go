// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/swiftlane/swiftlane/internal/api"
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
				t, err := c.CreateToken(cmd.Context(), api.TokenRequest{Role: role, Node: node, TTLSeconds: int64(ttl / time.Second), Subject: subject})
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
			fmt.Fprintf(os.Stderr, "swiftlane: %s token, expires %s\n", role, exp.UTC().Format(time.RFC3339))
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
	cmd.AddCommand(create)
	return cmd
}
