// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/swiftlane/swiftlane/internal/apiclient"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
)

// clientFlags are the connection flags shared by ctl and token.
type clientFlags struct {
	server, tokenFile, caFile string
}

func (f *clientFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.server, "server", envOr("SWIFTLANE_SERVER", "https://127.0.0.1:8443"), "control-plane URL ($SWIFTLANE_SERVER)")
	cmd.Flags().StringVar(&f.tokenFile, "token-file", os.Getenv("SWIFTLANE_TOKEN_FILE"), "file with a token ($SWIFTLANE_TOKEN_FILE, or the token itself in $SWIFTLANE_TOKEN)")
	cmd.Flags().StringVar(&f.caFile, "ca-file", envOr("SWIFTLANE_CA_FILE", ""), "PEM certificate to trust for the server, e.g. <data-dir>/tls.crt ($SWIFTLANE_CA_FILE)")
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func (f *clientFlags) client() (*apiclient.Client, error) {
	tok := os.Getenv("SWIFTLANE_TOKEN")
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		tok = strings.TrimSpace(string(b))
	}
	tlsCfg, err := auth.ClientTLS(f.caFile)
	if err != nil {
		return nil, err
	}
	return apiclient.NewClient(f.server, tok, tlsCfg), nil
}

func newCtlCmd() *cobra.Command {
	var cf clientFlags
	var output string
	ctl := &cobra.Command{
		Use:   "ctl",
		Short: "Control-plane CLI: get/apply/delete strategies, get nodes, workloads and GTP-U carriers, read the audit history, log in",
	}
	ctl.PersistentFlags().StringVarP(&output, "output", "o", "table", "table, json or yaml")
	persist := func(c *cobra.Command) *cobra.Command {
		cf.add(c)
		return c
	}

	get := &cobra.Command{
		Use:       "get strategies|nodes|workloads NODE|carriers NODE",
		Short:     "List strategies, nodes, a node's resolved workloads, or the processes automatic mode prioritises on it",
		Args:      cobra.RangeArgs(1, 2),
		ValidArgs: []string{"strategies", "nodes", "workloads", "carriers"},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client()
			if err != nil {
				return err
			}
			switch args[0] {
			case "strategies", "strategy", "st":
				l, err := c.ListStrategies(cmd.Context())
				if err != nil {
					return err
				}
				return show(cmd.OutOrStdout(), output, l, func(w io.Writer) {
					fmt.Fprintln(w, "NAME\tCLASS\tSLICE\tMATCH\tNODES\tREVISION")
					for _, s := range l.Strategies {
						slice := "-"
						if s.ExecutionTime > 0 {
							slice = time.Duration(s.ExecutionTime).String()
						}
						fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\n", s.Name, s.EffectiveClass(), slice, matchers(s.Strategy), selector(s.NodeSelector), s.Revision)
						for _, warn := range s.Warnings {
							fmt.Fprintf(w, "  warning: %s\n", warn)
						}
					}
				})
			case "nodes", "node", "no":
				l, err := c.ListNodes(cmd.Context())
				if err != nil {
					return err
				}
				return show(cmd.OutOrStdout(), output, l, func(w io.Writer) {
					fmt.Fprintln(w, "NAME\tHEALTHY\tMODE\tSCHEDULER\tKERNEL\tVERSION\tAPPLIED\tWORKLOADS\tLAST HEARTBEAT\tMATCHING NOTHING")
					for _, n := range l.Nodes {
						fmt.Fprintf(w, "%s\t%v\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", n.Name, n.Healthy, n.Mode, n.SchedulerState, n.Kernel, n.Version,
							n.AppliedRevision, len(n.Workloads), n.LastHeartbeat.Local().Format(time.DateTime), unmatchableColumn(n.Unmatchable))
					}
				})
			case "workloads", "wl":
				if len(args) != 2 {
					return fmt.Errorf("get workloads needs a node name: swiftlane ctl get workloads NODE")
				}
				l, err := c.Workloads(cmd.Context(), args[1])
				if err != nil {
					return err
				}
				return show(cmd.OutOrStdout(), output, l, func(w io.Writer) {
					fmt.Fprintln(w, "PID\tSTRATEGY\tCLASS\tINHERITED\tCOMMAND")
					for _, x := range l.Workloads {
						fmt.Fprintf(w, "%d\t%s\t%s\t%v\t%s\n", x.PID, x.Strategy, x.Class, x.Inherited, x.Cmdline)
					}
				})
			case "carriers", "ca":
				if len(args) != 2 {
					return fmt.Errorf("get carriers needs a node name: swiftlane ctl get carriers NODE")
				}
				l, err := c.Carriers(cmd.Context(), args[1])
				if err != nil {
					return err
				}
				return show(cmd.OutOrStdout(), output, l, func(w io.Writer) {
					fmt.Fprintln(w, "PID\tCOMMAND\tCLASS\tPACKETS\tPACKETS/S\tLAST PACKET\tSINCE\tFUNCTION")
					for _, x := range l.Carriers {
						fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%.0f\t%s\t%s\t%s\n", x.PID, x.Command, x.Class, x.Packets, x.PacketsPerSecond,
							clock(x.LastPacket, "15:04:05.000"), clock(x.Since, time.DateTime), x.Function)
					}
				})
			}
			return fmt.Errorf("unknown resource %q: use strategies, nodes, workloads or carriers", args[0])
		},
	}
	var file string
	apply := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create or replace the strategies in a YAML/JSON file (one strategy, a list, or {strategies: [...]}); - reads stdin",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := readStrategies(file)
			if err != nil {
				return err
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			for i, s := range list {
				out, err := c.PutStrategy(cmd.Context(), s)
				if err != nil {
					return fmt.Errorf("%s: strategies[%d] (%s): %w", file, i, s.Name, err)
				}
				fmt.Printf("strategy/%s applied (revision %d)\n", out.Name, out.Revision)
				for _, w := range out.Warnings {
					fmt.Fprintf(os.Stderr, "warning: strategy/%s: %s\n", out.Name, w)
				}
			}
			return nil
		},
	}
	apply.Flags().StringVarP(&file, "filename", "f", "", "file to apply (- for stdin)")
	_ = apply.MarkFlagRequired("filename")

	del := &cobra.Command{
		Use:   "delete strategy NAME...",
		Short: "Delete strategies",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] != "strategy" && args[0] != "strategies" {
				return fmt.Errorf("unknown resource %q: only strategies can be deleted here", args[0])
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			for _, name := range args[1:] {
				d, err := c.DeleteStrategy(cmd.Context(), name)
				if err != nil {
					return err
				}
				fmt.Printf("strategy/%s deleted (revision %d)\n", name, d.Revision)
			}
			return nil
		},
	}
	login := &cobra.Command{
		Use:   "login",
		Short: "Exchange the admin credential (read from stdin) for a token, printed to stdout",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			secret, err := io.ReadAll(io.LimitReader(os.Stdin, 4096))
			if err != nil {
				return err
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			t, err := c.Login(cmd.Context(), auth.AdminUser, strings.TrimSpace(string(secret)))
			if err != nil {
				return err
			}
			fmt.Println(t.Token)
			return nil
		},
	}
	for _, c := range []*cobra.Command{get, apply, del, login, newCtlAuditCmd(&cf, &output)} {
		ctl.AddCommand(persist(c))
	}
	ctl.AddCommand(newTokenCmd())
	return ctl
}

// newCtlAuditCmd is `ctl audit`: a page of the audit history (cf: ctl's
// connection flags, added by ctl).
func newCtlAuditCmd(cf *clientFlags, output *string) *cobra.Command {
	var q apitypes.AuditQuery
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Show the audit history, newest first: who changed which strategy, token or node, and how it ended (admin token)",
		Long: `Prints a page of the control plane's audit history (GET /api/v2/audit):
every strategy created, updated or deleted, token issued, renewed or
revoked and node deleted, with the caller's subject, role and node, the
object and the outcome. The last line names the --continue value that
prints the next, older page.

  swiftlane ctl audit --kind strategy --name gnb
  swiftlane ctl audit --subject alice -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.client()
			if err != nil {
				return err
			}
			l, err := c.ListAudit(cmd.Context(), q)
			if err != nil {
				return err
			}
			err = show(cmd.OutOrStdout(), *output, l, func(w io.Writer) {
				fmt.Fprintln(w, "TIME\tSUBJECT\tROLE\tNODE\tOPERATION\tOBJECT\tOUTCOME\tDETAIL")
				for _, e := range l.Entries {
					outcome, detail := e.Outcome, e.Detail
					if e.Outcome != apitypes.AuditOK {
						outcome += fmt.Sprintf(" (%d)", e.Status)
						detail = e.Error
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s/%s\t%s\t%s\n", e.Time.Local().Format(time.DateTime), e.Subject, e.Role,
						orDash(e.Node), e.Operation, e.Object.Kind, e.Object.Name, outcome, detail)
				}
			})
			if err == nil && l.Continue != "" && (*output == "table" || *output == "") {
				fmt.Fprintf(cmd.ErrOrStderr(), "older entries: swiftlane ctl audit --continue %s\n", l.Continue)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&q.Limit, "limit", 0, "entries to print (1..1000; default the server's, 100)")
	f.StringVar(&q.Before, "continue", "", "print the entries older than this (the value the previous page ended with)")
	f.StringVar(&q.Subject, "subject", "", "only changes by this token subject")
	f.StringVar(&q.Operation, "operation", "", "only this operation: strategy.create, strategy.update, strategy.delete, token.issue, token.renew, token.revoke, node.delete")
	f.StringVar(&q.Kind, "kind", "", "only changes to this kind of object: strategy, token, node")
	f.StringVar(&q.Name, "name", "", "only changes to the object of this name (a strategy or node name, a token id)")
	return cmd
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// clock prints a node's timestamp in local time, "-" when it has none. It
// is the node's clock: an age against ours would add their skew.
func clock(at time.Time, layout string) string {
	if at.IsZero() {
		return "-"
	}
	return at.Local().Format(layout)
}

func matchers(s apitypes.Strategy) string {
	var m []string
	if s.CommandRegex != "" {
		m = append(m, "cmd~"+s.CommandRegex)
	}
	if s.PID != 0 {
		m = append(m, fmt.Sprintf("pid=%d", s.PID))
	}
	if s.CgroupPath != "" {
		m = append(m, "cgroup="+s.CgroupPath)
	}
	for _, sel := range s.Selectors {
		m = append(m, "pod:"+sel.Key+"="+sel.Value)
	}
	if len(s.Namespaces) > 0 {
		m = append(m, "ns="+strings.Join(s.Namespaces, "|"))
	}
	return strings.Join(m, " ")
}

func selector(m map[string]string) string {
	if len(m) == 0 {
		return "*"
	}
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return strings.Join(out, ",")
}

func show(out io.Writer, format string, v any, table func(io.Writer)) error {
	switch format {
	case "json":
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		// Through JSON so the keys are the API's.
		b, _ := json.Marshal(v)
		var generic any
		_ = json.Unmarshal(b, &generic)
		return yaml.NewEncoder(out).Encode(generic)
	case "table", "":
		w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
		table(w)
		return w.Flush()
	}
	return fmt.Errorf("-o %q: use table, json or yaml", format)
}

// readStrategies accepts one strategy, a list, or {strategies: [...]} in
// YAML or JSON, strictly (unknown fields are errors, as in the API).
func readStrategies(file string) ([]apitypes.Strategy, error) {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, err
	}
	var generic any
	if err := yaml.Unmarshal(data, &generic); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if m, ok := generic.(map[string]any); ok {
		if inner, ok := m["strategies"]; ok && len(m) == 1 {
			generic = inner
		}
	}
	if _, ok := generic.([]any); !ok {
		generic = []any{generic}
	}
	js, err := json.Marshal(generic)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var list []apitypes.Strategy
	if err := dec.Decode(&list); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	for i := range list {
		if err := list[i].Validate(); err != nil {
			return nil, fmt.Errorf("%s: strategies[%d].%w", file, i, err)
		}
	}
	return list, nil
}

// unmatchableColumn names a node's strategies that match nothing there,
// with the reason ("-": none); -o json carries the fixes.
func unmatchableColumn(us []apitypes.Unmatchable) string {
	if len(us) == 0 {
		return "-"
	}
	names := make([]string, len(us))
	for i, u := range us {
		names[i] = u.Strategy + " (" + u.Reason + ")"
	}
	return strings.Join(names, ", ")
}
