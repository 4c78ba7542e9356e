// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/swiftlane/swiftlane/internal/trace"
)

func newTraceCmd() *cobra.Command {
	root := &cobra.Command{Use: "trace", Short: "Kernel tracers"}
	var funcs []string
	var every time.Duration
	var duration time.Duration
	gtp := &cobra.Command{
		Use:   "gtp",
		Short: "Show which processes and CPUs run the kernel's GTP-U path",
		Long: `Attaches fentry programs to the GTP-U functions of the kernel's gtp module
(and gtp5g when loaded) and prints one line per traced event: process, CPU,
context and device. Events in softirq (pid 0, ksoftirqd, an interrupted task)
are shown as the CPU handling them. On exit, prints the per-process and
per-CPU call counts. Needs the module loaded (its BTF in /sys/kernel/btf).
--functions tun_get_user,tun_do_read shows who moves packets through TUN devices.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := newLogger(false)
			t, err := trace.Load(trace.Options{Functions: funcs, EmitInterval: every, Log: log})
			if err != nil {
				return err
			}
			defer t.Close()
			fmt.Fprintf(os.Stderr, "swiftlane: tracing %s\n", strings.Join(t.Functions(), ", "))
			ctx := cmd.Context()
			if duration > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, duration)
				defer cancel()
			}
			out := cmd.OutOrStdout()
			err = t.Run(ctx, func(ev trace.Event) {
				who := fmt.Sprintf("pid %d/%d %s", ev.TGID, ev.PID, ev.Comm)
				if ev.Context != trace.Process {
					who = fmt.Sprintf("softirq (%s, %s)", ev.Context, ev.Comm)
				}
				fmt.Fprintf(out, "%d cpu %d %s %s ifindex %d %s\n", ev.KtimeNs, ev.CPU, ev.Function, who, ev.Ifindex, ev.Ifname)
			})
			counts, cerr := t.Counts()
			if cerr != nil {
				return cerr
			}
			w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(w, "PROCESS/CPU\tCONTEXT\tFUNCTION\tCALLS")
			for _, c := range counts {
				who := fmt.Sprintf("pid %d", c.TGID)
				if c.Context != trace.Process {
					who = fmt.Sprintf("cpu %d", c.CPU)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\n", who, c.Context, c.Function, c.Packets)
			}
			w.Flush()
			return err
		},
	}
	gtp.Flags().StringSliceVar(&funcs, "functions", nil, "kernel functions to trace (default: the gtp and gtp5g GTP-U path)")
	gtp.Flags().DurationVar(&every, "every", 0, "at most one event per process and function per this interval (0: every call)")
	gtp.Flags().DurationVar(&duration, "duration", 0, "stop after this long (0: until SIGINT/SIGTERM)")
	root.AddCommand(gtp)
	return root
}
