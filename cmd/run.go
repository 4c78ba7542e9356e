// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/swiftlane/swiftlane/internal/config"
	"github.com/swiftlane/swiftlane/internal/noderuntime"
	"github.com/swiftlane/swiftlane/internal/schedext"
	"github.com/swiftlane/swiftlane/usersched"
)

func newRunCmd() *cobra.Command {
	var cfgPath, metricsAddr string
	var profiling bool
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Attach the scheduler and apply strategies until SIGINT/SIGTERM",
		Long: `Loads swiftlane's sched_ext scheduler, makes it the kernel's scheduler,
applies the strategies from the config file, and detaches cleanly on SIGINT or
SIGTERM. If the kernel ejects the scheduler, prints the kernel's reason.

--mode userspace runs the scheduling policy in this process instead (package
usersched, docs/userspace.md): the BPF side hands every runnable task to a Go
loop and applies its decisions; critical strategies are still served in BPF.
--policy picks the built-in policy: vruntime (the in-kernel ordering, in Go)
or fifo. Both override the config's scheduler.mode and scheduler.policy.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cfgPath, config.Run)
			if err != nil {
				return err
			}
			if err := runFlags(cmd.Flags(), &cfg.Scheduler); err != nil {
				return err
			}
			return nodeExit(noderuntime.Run(cmd.Context(), noderuntime.Options{
				Config: cfg, Strategies: cfg.Strategies, MetricsAddr: metricsAddr, Profiling: profiling, Log: newLogger(cfg.Debug),
			}, nil))
		},
	}
	cmd.Flags().StringVarP(&cfgPath, "config", "c", "", "config file (YAML); defaults apply without one")
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "127.0.0.1:9461", "serve /metrics, /healthz and /readyz on this address (empty: off)")
	cmd.Flags().BoolVar(&profiling, "profiling", false, "also serve Go's profiles of this process under /debug/pprof/ on --metrics-addr (e.g. go tool pprof http://127.0.0.1:9461/debug/pprof/profile?seconds=10)")
	cmd.Flags().String("mode", "", "kernel: the policy runs in BPF; userspace: in this process, in Go (default: the config's scheduler.mode, kernel)")
	cmd.Flags().String("policy", "", "user-space policy: vruntime or fifo (--mode userspace; default: the config's scheduler.policy, vruntime)")
	return cmd
}

// runFlags lays --mode and --policy, where given, over the config's
// scheduler.mode and scheduler.policy.
func runFlags(f *pflag.FlagSet, s *config.Scheduler) error {
	if f.Changed("mode") {
		mode, _ := f.GetString("mode")
		switch mode {
		case config.ModeKernel:
			s.Policy = "" // the config's policy was for its user-space mode
		case config.ModeUserspace:
		default:
			return fmt.Errorf("--mode %q: use kernel or userspace", mode)
		}
		s.Mode = mode
	}
	if f.Changed("policy") {
		policy, _ := f.GetString("policy")
		if s.Mode != config.ModeUserspace {
			return fmt.Errorf("--policy %s: policies are for --mode userspace; the kernel mode's policy is built in", policy)
		}
		if !slices.Contains(usersched.PolicyNames(), policy) {
			return fmt.Errorf("--policy %q: use one of %s", policy, strings.Join(usersched.PolicyNames(), ", "))
		}
		s.Policy = policy
	}
	return nil
}

// loadConfig reads --config for cmd, or gives the defaults without one.
func loadConfig(path string, cmd config.Command) (config.Config, error) {
	if path == "" {
		return config.Default(), nil
	}
	cfg, err := config.Load(path)
	if err == nil {
		if err = cfg.CheckAPIEnabled(cmd); err != nil {
			err = fmt.Errorf("config %s: %w", path, err)
		}
	}
	return cfg, err
}

// nodeExit gives the node runtime's end its exit status, for run and
// agent: 2 where the kernel cannot run the scheduler, 1 when the kernel
// stopped it (the runtime has said why).
func nodeExit(err error) error {
	var ue *schedext.UnsupportedError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintln(os.Stderr, "swiftlane: cannot run here:", ue)
		return exitError{code: 2}
	case errors.Is(err, noderuntime.ErrStopped):
		return exitError{code: 1}
	}
	return err
}
