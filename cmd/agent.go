// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/swiftlane/swiftlane/internal/agent"
	"github.com/swiftlane/swiftlane/internal/api"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/config"
	"github.com/swiftlane/swiftlane/internal/sched"
	"github.com/swiftlane/swiftlane/internal/store"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

func newAgentCmd() *cobra.Command {
	var cfgPath, server, node, tokenFile, caFile, dataDir, stateFile string
	var labels []string
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Node agent: the scheduler plus the control plane's strategies, pushed",
		Long: `Registers this node with the control plane, receives strategy changes by push
(a watch stream resumed from the last revision), applies them to the scheduler
and heartbeats its counters and resolved processes every api.interval seconds.
If the kernel has no sched_ext it runs in observe mode: it resolves and reports
strategies but schedules nothing. With the server down it keeps applying the
last strategies it knew (also across restarts, from --state-file).

On the server's machine, --data-dir mints the agent's own token with the
server's key and trusts its generated certificate; elsewhere pass --token-file
(from 'swiftlane token create --role agent --node NAME') and --ca-file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := config.Default()
			if cfgPath != "" {
				var err error
				if cfg, err = config.Load(cfgPath); err != nil {
					return err
				}
				if !cmd.Flags().Changed("server") {
					server = cfg.API.URL
				}
			}
			lbl, err := parseLabels(labels)
			if err != nil {
				return err
			}
			if node == "" {
				h, _ := os.Hostname()
				node = strings.ToLower(h)
			}
			if !auth.ValidNodeName(node) {
				return fmt.Errorf("--node %q is not a node name: use lower-case letters, digits, '.', '_' or '-'", node)
			}
			token, err := agentToken(dataDir, tokenFile, node)
			if err != nil {
				return err
			}
			if caFile == "" && dataDir != "" && strings.HasPrefix(server, "https:") {
				caFile = filepath.Join(dataDir, auth.CertFile)
			}
			tlsCfg, err := auth.ClientTLS(caFile)
			if err != nil {
				return err
			}
			return runAgent(cmd.Context(), cfg, agent.Options{
				Client: api.NewClient(server, token, tlsCfg), Node: node, Labels: lbl, Version: version,
				Kernel: kernelRelease(), Interval: time.Duration(cfg.API.Interval) * time.Second, StateFile: stateFile,
				Log: newLogger(cfg.Debug),
			})
		},
	}
	f := cmd.Flags()
	f.StringVarP(&cfgPath, "config", "c", "", "config file (scheduler tunables, api.url, api.interval)")
	f.StringVar(&server, "server", "https://127.0.0.1:8443", "control-plane URL (default: api.url from --config if given)")
	f.StringVar(&node, "node", "", "node name (default: the host name)")
	f.StringSliceVar(&labels, "labels", nil, "node labels, k=v,... (strategies' node_selector matches them)")
	f.StringVar(&tokenFile, "token-file", "", "file holding this node's agent token")
	f.StringVar(&caFile, "ca-file", "", "PEM certificate(s) to trust for the server (its generated tls.crt)")
	f.StringVar(&dataDir, "data-dir", "", "the server's data directory, when on the same machine (mints the token, trusts tls.crt)")
	f.StringVar(&stateFile, "state-file", "/var/lib/swiftlane-agent/state.json", "last known strategies (empty: memory only)")
	return cmd
}

func parseLabels(kvs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--labels %q: use key=value", kv)
		}
		out[k] = v
	}
	return out, nil
}

func agentToken(dataDir, tokenFile, node string) (string, error) {
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	if dataDir != "" {
		a, err := auth.LoadSigner(dataDir)
		if err != nil {
			return "", err
		}
		tok, _, err := a.Issue("agent:"+node, auth.Agent, node, 365*24*time.Hour)
		return tok, err
	}
	if t := os.Getenv("SWIFTLANE_TOKEN"); t != "" {
		return t, nil
	}
	return "", errors.New("no token: pass --token-file (swiftlane token create --role agent --node NAME), or --data-dir on the server's machine")
}

func kernelRelease() string {
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	return unix.ByteSliceToString(uts.Release[:])
}

// runAgent attaches the scheduler when the kernel can run it, else runs in
// observe mode, and runs the agent until ctx ends or the kernel ejects the
// scheduler.
func runAgent(ctx context.Context, cfg config.Config, o agent.Options) error {
	if o.StateFile != "" {
		if err := os.MkdirAll(filepath.Dir(o.StateFile), 0o700); err != nil {
			return fmt.Errorf("--state-file: %w", err)
		}
	}
	o.SchedulerState = func() string {
		state, ops, err := sched.State()
		if err != nil {
			return "unavailable"
		}
		if ops != "" {
			return state + " (" + ops + ")"
		}
		return state
	}
	if err := sched.Check(); err != nil {
		var ue *sched.UnsupportedError
		if !errors.As(err, &ue) {
			return err
		}
		fmt.Fprintln(os.Stderr, "swiftlane: observe mode (strategies are resolved and reported, nothing is scheduled):", ue)
		o.Mode, o.Reason = agent.ModeObserve, ue.Error()
		o.Applier = strategy.NewApplier(agent.NewRecordingTarget(), "/proc", "/sys/fs/cgroup", o.Log)
		a, err := agent.New(o)
		if err != nil {
			return err
		}
		return a.Run(ctx)
	}

	s, err := sched.Load(sched.Options{
		SliceNs: cfg.Scheduler.SliceNsDefault, SliceMinNs: cfg.Scheduler.SliceNsMin,
		EarlyProcessing: cfg.EarlyProcessing, BuiltinIdle: cfg.BuiltinIdle, Log: o.Log,
	})
	if err != nil {
		return err
	}
	defer s.Close()
	o.Mode = agent.ModeSchedule
	o.Applier = strategy.NewApplier(s, "/proc", "/sys/fs/cgroup", o.Log)
	o.Stats = func() (*store.Counters, error) {
		st, err := s.ReadStats()
		if err != nil {
			return nil, err
		}
		return countersOf(st), nil
	}
	a, err := agent.New(o) // applies the state file's strategies before attach
	if err != nil {
		return err
	}
	if err := s.Attach(); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "swiftlane: scheduler attached; agent running")
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() { a.Run(actx); close(done) }()
	exit, err := s.RunEvents(ctx, o.Applier)
	cancel()
	<-done
	if ctx.Err() != nil {
		if derr := s.Detach(); derr != nil {
			return fmt.Errorf("detach: %w", derr)
		}
		fmt.Fprintln(os.Stderr, "swiftlane: detached")
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "swiftlane: the kernel stopped the scheduler:", exit)
	return exitError{code: 1}
}

func countersOf(st sched.Stats) *store.Counters {
	c := &store.Counters{
		Enqueued: map[string]uint64{},
		Dispatched: map[string]uint64{
			"direct": st.DirectDispatch, "shared": st.SharedDispatch, "critical": st.CriticalDispatch, "kthread": st.KthreadDispatch,
		},
		PreemptKicks: st.PreemptKicks, WakeupPreempts: st.WakeupPreempts, CriticalDemoted: st.CriticalDemoted,
		StarvationRescues: st.StarvationRescues, EventsDropped: st.EventsDropped,
		RunqueueWait: map[string]store.WaitHistogram{},
	}
	for i := range sched.NrClasses {
		name := strategy.Class(i).String()
		c.Enqueued[name] = st.Enqueued[i]
		c.RunqueueWait[name] = store.WaitHistogram{Count: st.WaitCount[i], SumNs: st.WaitSumNs[i], Buckets: append([]uint64(nil), st.WaitHist[i][:]...)}
	}
	return c
}
