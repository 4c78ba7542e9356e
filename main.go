// SPDX-License-Identifier: Apache-2.0

// Command swiftlane is a sched_ext scheduler that gives latency-critical
// network functions a fast lane, plus the tools around it.
package main

import (
	"os"

	"github.com/swiftlane/swiftlane/cmd"
)

func main() {
	os.Exit(cmd.Execute())
}
