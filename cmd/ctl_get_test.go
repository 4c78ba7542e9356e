// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/apiclient"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
)

// TestCtlGetCarriers: `swiftlane ctl get carriers NODE` lists what a node's
// agent last reported automatic mode prioritises, from a real API server
// over HTTP, as a table and as JSON.
func TestCtlGetCarriers(t *testing.T) {
	a, url, ctx := ctlServer(t)
	agentTok, _, _ := a.Issue("ctl-test", auth.Agent, "n1", time.Hour)
	ag := apiclient.NewClient(url, agentTok, nil)
	if _, err := ag.RegisterNode(ctx, "n1", apitypes.Registration{Mode: "schedule", HeartbeatSeconds: 5}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := ag.Heartbeat(ctx, "n1", apitypes.Heartbeat{SchedulerState: "enabled", Carriers: []apitypes.Carrier{
		{PID: 4242, Command: "nr-gnb", Class: "critical", Function: "gtp_encap_recv", Since: now.Add(-time.Minute), LastPacket: now, Packets: 9000, PacketsPerSecond: 150},
	}}); err != nil {
		t.Fatal(err)
	}

	viewerTok, _, _ := a.Issue("ctl-test", auth.Viewer, "", time.Hour)
	ctl := func(args ...string) (string, error) {
		out, errOut, err := runCtl(ctx, t, url, viewerTok, args...)
		return out + errOut, err
	}
	out, err := ctl("get", "carriers", "n1")
	if err != nil {
		t.Fatalf("get carriers: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "PID") || !strings.Contains(lines[1], "4242") ||
		!strings.Contains(lines[1], "nr-gnb") || !strings.Contains(lines[1], "150") || !strings.Contains(lines[1], "gtp_encap_recv") {
		t.Fatalf("table:\n%s", out)
	}
	out, err = ctl("get", "carriers", "n1", "-o", "json")
	var l apitypes.CarrierList
	if err != nil || json.Unmarshal([]byte(out), &l) != nil || l.Node != "n1" || len(l.Carriers) != 1 || l.Carriers[0].Packets != 9000 {
		t.Fatalf("json: %v\n%s", err, out)
	}
	if _, err := ctl("get", "carriers"); err == nil || !strings.Contains(err.Error(), "get carriers NODE") {
		t.Fatalf("without a node: %v, want the usage", err)
	}
	if _, err := ctl("get", "carriers", "n9"); err == nil || !strings.Contains(err.Error(), "n9") {
		t.Fatalf("unknown node: %v, want an error naming it", err)
	}
}

// TestCtlGetNodesMatchingNothing: the strategies a node reports as
// matching nothing there are in `ctl get nodes`, with the reason; a node
// without any shows "-".
func TestCtlGetNodesMatchingNothing(t *testing.T) {
	a, url, ctx := ctlServer(t)
	for _, node := range []string{"n1", "n2"} {
		tok, _, _ := a.Issue("ctl-test", auth.Agent, node, time.Hour)
		ag := apiclient.NewClient(url, tok, nil)
		if _, err := ag.RegisterNode(ctx, node, apitypes.Registration{Mode: "observe", HeartbeatSeconds: 5}); err != nil {
			t.Fatal(err)
		}
		hb := apitypes.Heartbeat{SchedulerState: "disabled"}
		if node == "n1" {
			hb.Unmatchable = []apitypes.Unmatchable{{Strategy: "pods", Reason: "selectors_without_pod_source", Fix: "use command_regex"}}
		}
		if _, err := ag.Heartbeat(ctx, node, hb); err != nil {
			t.Fatal(err)
		}
	}
	viewerTok, _, _ := a.Issue("ctl-test", auth.Viewer, "", time.Hour)
	out, errOut, err := runCtl(ctx, t, url, viewerTok, "get", "nodes")
	if err != nil {
		t.Fatalf("get nodes: %v\n%s%s", err, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasSuffix(strings.TrimSpace(lines[0]), "MATCHING NOTHING") {
		t.Fatalf("table:\n%s", out)
	}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		switch f[0] {
		case "n1":
			if !strings.HasSuffix(l, "pods (selectors_without_pod_source)") {
				t.Errorf("n1's row does not name pods and the reason: %q", l)
			}
		case "n2":
			if f[len(f)-1] != "-" {
				t.Errorf("n2's row: %q, want - in the last column", l)
			}
		}
	}
}
