// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/swiftlane/swiftlane/internal/probe"
)

func newProbeCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "probe",
		Short: "Latency probes: a UDP echo between two processes",
	}
	var listen string
	echo := &cobra.Command{
		Use:   "echo",
		Short: "Answer UDP datagrams (the far end of `probe rtt`)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			conn, err := net.ListenPacket("udp", listen)
			if err != nil {
				return fmt.Errorf("--listen %s: %w", listen, err)
			}
			fmt.Fprintln(os.Stderr, "probe echo: listening on", conn.LocalAddr())
			return probe.Echo(cmd.Context(), conn)
		},
	}
	echo.Flags().StringVar(&listen, "listen", "127.0.0.1:7777", "UDP address to listen on")

	var o probe.Options
	var jsonOut string
	var raw bool
	rtt := &cobra.Command{
		Use:   "rtt",
		Short: "Time UDP round trips to a `probe echo`",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := probe.RTT(cmd.Context(), o)
			if err != nil {
				return err
			}
			if !raw {
				res.RTTUs, res.ClientCPU, res.ServerCPU = nil, nil, nil
			}
			fmt.Println(res)
			if jsonOut != "" {
				b, _ := json.MarshalIndent(res, "", "  ")
				return os.WriteFile(jsonOut, append(b, '\n'), 0o644)
			}
			return nil
		},
	}
	rtt.Flags().StringVar(&o.Target, "target", "127.0.0.1:7777", "address of the echo server")
	rtt.Flags().IntVar(&o.Samples, "samples", 500, "round trips to time")
	rtt.Flags().DurationVar(&o.Interval, "interval", 2*time.Millisecond, "pause between round trips")
	rtt.Flags().DurationVar(&o.Timeout, "timeout", time.Second, "per round trip")
	rtt.Flags().DurationVar(&o.Duration, "duration", 0, "stop after this long even if fewer samples were taken (0: no limit)")
	rtt.Flags().StringVar(&jsonOut, "json", "", "also write the result as JSON to this file")
	rtt.Flags().BoolVar(&raw, "raw", false, "include every sample (and the client's and server's CPU for it) in the JSON")
	root.AddCommand(echo, rtt)
	return root
}
