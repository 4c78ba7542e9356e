// SPDX-License-Identifier: Apache-2.0

// Package cmd wires swiftlane's subcommands. It stays thin: each command
// parses flags and hands off to a package under internal/.
package cmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set at link time (-X).
var version = "dev"

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "swiftlane",
		Short:         "A sched_ext scheduler with a fast lane for latency-critical network functions",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	root.AddCommand(
		newRunCmd(),
		newStatsCmd(),
		newProbeCmd(),
		newLBCmd(),
		newTraceCmd(), newLabCmd(),
		newAPICmd(), newAgentCmd(), newCtlCmd(), newTokenCmd(),
	)
	return root
}

// Execute runs the command line and returns the process exit status.
func Execute() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRoot().ExecuteContext(ctx); err != nil {
		var ee exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		fmt.Fprintln(os.Stderr, "swiftlane:", err)
		return 1
	}
	return 0
}

// exitError carries a specific exit status up to Execute after the command
// has already printed what went wrong.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func newLogger(debug bool) *slog.Logger {
	if debug {
		return newLoggerFormat("debug", "text")
	}
	return newLoggerFormat("info", "text")
}

// newLoggerFormat logs to stderr at level (debug, info, warn, error) as
// text or JSON (one object a line, for log shippers).
func newLoggerFormat(level, format string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level)) // validated by the config
	o := &slog.HandlerOptions{Level: l}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, o))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, o))
}
