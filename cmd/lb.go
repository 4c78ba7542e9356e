// SPDX-License-Identifier: Apache-2.0

package cmd

import "github.com/spf13/cobra"

// newLBCmd is the service load balancer (issue: conntrack-free service LB).
func newLBCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "lb",
		Short:  "Conntrack-free service load balancer (eBPF DNAT/SNAT at tc)",
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return errNotYet("lb")
		},
	}
}
