// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/swiftlane/swiftlane/internal/agent"
	"github.com/swiftlane/swiftlane/internal/config"
	"github.com/swiftlane/swiftlane/internal/kubeagent"
	"github.com/swiftlane/swiftlane/internal/noderuntime"
)

// Wrong --mode/--policy combinations fail before anything is loaded, naming
// the flag and what to use.
func TestRunFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mode", "hybrid"}, `--mode "hybrid": use kernel or userspace`},
		{[]string{"--mode", "userspace", "--policy", "lottery"}, `--policy "lottery": use one of vruntime, fifo`},
		{[]string{"--policy", "fifo"}, "--policy fifo: policies are for --mode userspace"},
	} {
		cmd := newRunCmd()
		cmd.SetArgs(tc.args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run %v: got %v, want %q", tc.args, err, tc.want)
		}
	}
}

// The flags override the config's mode and policy where given; a policy
// needs the user-space mode from either.
func TestRunFlagsOverTheConfig(t *testing.T) {
	user := config.Scheduler{Mode: config.ModeUserspace, Policy: "fifo"}
	for _, tc := range []struct {
		name string
		cfg  config.Scheduler
		args []string
		want config.Scheduler
		err  string
	}{
		{"no flags", user, nil, user, ""},
		{"policy for the config's user-space mode", config.Scheduler{Mode: config.ModeUserspace}, []string{"--policy", "fifo"}, user, ""},
		{"kernel mode drops the config's policy", user, []string{"--mode", "kernel"}, config.Scheduler{Mode: config.ModeKernel}, ""},
		{"user-space mode from the flag", config.Scheduler{Mode: config.ModeKernel}, []string{"--mode", "userspace", "--policy", "fifo"}, user, ""},
		{"policy for the config's kernel mode", config.Scheduler{Mode: config.ModeKernel}, []string{"--policy", "fifo"}, config.Scheduler{}, "--policy fifo: policies are for --mode userspace"},
	} {
		cmd := newRunCmd()
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatal(err)
		}
		got := tc.cfg
		err := runFlags(cmd.Flags(), &got)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%s: got %+v (%v), want %+v", tc.name, got, err, tc.want)
		}
	}
}

// The agents report the runtime's mode as it is.
func TestNodeModesAreTheAgents(t *testing.T) {
	for _, p := range [][2]string{
		{noderuntime.Schedule, agent.ModeSchedule}, {noderuntime.Schedule, kubeagent.ModeSchedule},
		{noderuntime.Observe, agent.ModeObserve}, {noderuntime.Observe, kubeagent.ModeObserve},
	} {
		if p[0] != p[1] {
			t.Errorf("the runtime's mode %q is the agents' %q", p[0], p[1])
		}
	}
}

// swiftlane run and swiftlane agent refuse a file whose api.enabled
// contradicts them, before anything starts, naming the file, key and fix.
func TestAPIEnabledRefusedByTheCommand(t *testing.T) {
	dir := t.TempDir()
	write := func(name, enabled string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("api:\n  enabled: "+enabled+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	on, off := write("on.yaml", "true"), write("off.yaml", "false")
	for _, tc := range []struct {
		cmd  *cobra.Command
		args []string
		want string
	}{
		{newRunCmd(), []string{"--config", on}, "config " + on + ": api.enabled (line 2): true, but swiftlane run never connects"},
		{newAgentCmd(), []string{"--config", off}, "config " + off + ": api.enabled (line 2): false, but swiftlane agent always connects"},
		{newAgentCmd(), []string{"--config", on, "--source", "kubernetes"}, "config " + on + ": api.enabled (line 2): true, but swiftlane agent --source kubernetes"},
	} {
		tc.cmd.SetArgs(tc.args)
		tc.cmd.SetOut(io.Discard)
		tc.cmd.SetErr(io.Discard)
		if err := tc.cmd.Execute(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v: got %v, want %q", tc.cmd.Name(), tc.args, err, tc.want)
		}
	}
}
