// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/swiftlane/swiftlane/internal/gtplab"
)

func newLabCmd() *cobra.Command {
	root := &cobra.Command{Use: "lab", Short: "The 5G user-plane lab (network namespaces, a gtp or gtp5g UPF, our gNB)"}
	t := gtplab.Default()

	up := &cobra.Command{
		Use:   "up",
		Short: "Create the UE, gNB and UPF namespaces and the UPF's GTP-U device; remove them on SIGINT/SIGTERM",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := gtplab.Up(t)
			if err != nil {
				return err
			}
			defer l.Close()
			fmt.Fprintf(os.Stderr, "swiftlane: lab up: UE %s in %s, gNB N3 %s in %s, UPF (%s) N3 %s / N6 %s in %s\n",
				t.UEAddr, t.UENetns, t.GNBN3, t.GNBNetns, t.UPFKind(), t.UPFN3, t.N6Addr, t.UPFNetns)
			<-cmd.Context().Done()
			if s, err := l.Stats(); err == nil {
				fmt.Fprintf(os.Stderr, "swiftlane: lab down: %s rx %d tx %d packets\n", t.GTPDev, s.RxPackets, s.TxPackets)
			}
			return nil
		},
	}
	// Every lab command of one lab must be given the same --ues.
	root.PersistentFlags().IntVar(&t.UEs, "ues", t.UEs, "UEs with a PDU session (1-200): addresses from "+t.UEAddr.String()+", TEIDs up from the first UE's")
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if t.UEs < 1 || t.UEs > 200 {
			return fmt.Errorf("--ues %d: give 1 to 200 (one address each after %s, and uplink TEIDs must stay below the downlink ones)", t.UEs, t.UEAddr)
		}
		return nil
	}
	up.Flags().StringVar(&t.UPF, "upf", gtplab.UPFGTP, `the UPF's module: "gtp" (the kernel's) or "gtp5g" (free5GC's; loaded from .cache/gtp5g when not installed, see lab/gtp5g.sh)`)
	down := &cobra.Command{
		Use:   "down",
		Short: "Remove the lab's namespaces (after a crash)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return (&gtplab.Lab{T: t}).Close() // fds are zero: nothing to close but the namespaces
		},
	}
	gnb := &cobra.Command{
		Use:   "gnb",
		Short: "Run the gNB: the UE's tunnel interface <-> GTP-U over UDP to the UPF",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g, err := gtplab.NewGnb(t)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "swiftlane: gnb ready: %s in %s <-> GTP-U %s -> %s\n", t.TUN, t.UENetns, t.GNBN3, t.UPFN3)
			return g.Run(cmd.Context())
		},
	}
	var count int
	var interval, timeout time.Duration
	var asJSON bool
	ping := &cobra.Command{
		Use:   "ping",
		Short: "Ping the UPF's N6 address from the UE through the GTP-U tunnel; print RTTs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := gtplab.NewPinger(t, timeout)
			if err != nil {
				return err
			}
			defer p.Close()
			rtts := make([]float64, 0, count)
			for i := 0; i < count && cmd.Context().Err() == nil; i++ {
				if i > 0 && interval > 0 {
					time.Sleep(interval) // the probe's pacing, not synchronisation
				}
				d, err := p.Ping()
				if err != nil {
					return err
				}
				rtts = append(rtts, float64(d.Microseconds())/1000)
				if !asJSON {
					fmt.Fprintf(cmd.OutOrStdout(), "seq %d rtt %.3f ms\n", i+1, rtts[i])
				}
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"rtt_ms": rtts})
			}
			return nil
		},
	}
	ping.Flags().IntVarP(&count, "count", "c", 10, "echo requests to send")
	ping.Flags().DurationVarP(&interval, "interval", "i", 20*time.Millisecond, "gap between a reply and the next request")
	ping.Flags().DurationVar(&timeout, "timeout", 2*time.Second, "how long to wait for each reply")
	ping.Flags().BoolVar(&asJSON, "json", false, `print {"rtt_ms": [...]} instead of one line per reply`)
	var pps int
	traffic := &cobra.Command{
		Use:   "traffic",
		Short: "Send the other UEs' background traffic (ICMP echo to the N6 address) through the gNB until stopped",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var tr gtplab.Traffic
			fmt.Fprintf(os.Stderr, "swiftlane: traffic: UEs 2-%d, %d packets/s each to %s\n", t.UEs, pps, t.N6Addr)
			err := tr.Run(cmd.Context(), t, pps)
			fmt.Fprintf(os.Stderr, "swiftlane: traffic: %d sent, %d failed (no gNB)\n", tr.Sent.Load(), tr.Failed.Load())
			return err
		},
	}
	traffic.Flags().IntVar(&pps, "pps", 50, "echo requests per second from each UE")
	pause := &cobra.Command{
		Use:    "pause",
		Short:  "Hold a pod sandbox's namespaces until SIGINT/SIGTERM, reaping orphans (the lab cluster's pause image)",
		Args:   cobra.NoArgs,
		Hidden: true, // a container runtime runs it, not a user
		RunE: func(*cobra.Command, []string) error {
			sandboxPause(nil)
			return nil
		},
	}
	root.AddCommand(up, down, gnb, ping, traffic, pause)
	return root
}

// sandboxPause is what a Kubernetes pod sandbox's process does: nothing,
// as PID 1 of the pod's namespaces, reaping the orphans a shared PID
// namespace hands it, until told to stop. make test-cluster's runtime has no
// registry to pull the usual pause image from, so it runs this instead.
// listening, if set, is called once the signals are caught.
func sandboxPause(listening func()) {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	defer signal.Stop(sig)
	reap := func() {
		for {
			if pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				return
			}
		}
	}
	reap() // children that exited before the handler was in place sent their SIGCHLD to no one
	if listening != nil {
		listening()
	}
	for s := range sig {
		if s != syscall.SIGCHLD {
			return
		}
		reap()
	}
}
