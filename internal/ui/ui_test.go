// SPDX-License-Identifier: Apache-2.0

package ui_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/swiftlane/swiftlane/internal/agent"
	"github.com/swiftlane/swiftlane/internal/api"
	"github.com/swiftlane/swiftlane/internal/apiclient"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/applier"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/store"
	"github.com/swiftlane/swiftlane/internal/ui"
)

const chromium = "/usr/bin/chromium"

// TestUIInChromium drives the UI in headless Chromium against a real server
// and a real agent: log in, get a validation message, create a strategy,
// see it resolved on the node, with screenshots. Skipped without Chromium
// unless SWIFTLANE_REQUIRE_CHROMIUM=1 (make test-ui) makes that a failure.
func TestUIInChromium(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		if os.Getenv("SWIFTLANE_REQUIRE_CHROMIUM") == "1" {
			t.Fatalf("%s missing: run mk/control-deps.sh", chromium)
		}
		t.Skipf("%s missing (mk/control-deps.sh installs it)", chromium)
	}
	shots := os.Getenv("SWIFTLANE_UI_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}

	// Server with the UI.
	dir := t.TempDir()
	a, bootstrap, err := auth.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv, err := api.New(api.Options{Store: st, Auth: a, Version: "ui-test", UI: ui.Handler()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	served := make(chan struct{})
	go func() { srv.Serve(ctx, ln, nil); close(served) }()
	defer func() { cancel(); <-served }()
	url := "http://" + ln.Addr().String()

	// A node agent over a fake process table, with scheduler counters.
	proc := t.TempDir()
	pdir := filepath.Join(proc, "4242")
	os.MkdirAll(pdir, 0o755)
	os.WriteFile(filepath.Join(pdir, "cmdline"), []byte("nr-gnb\x00-c\x00gnb.yaml\x00"), 0o644)
	tok, _, _ := a.Issue("ui-test", auth.Agent, "n1", time.Hour)
	// The browser and this test share the machine's time zone.
	lastPacket := time.Date(2026, 11, 26, 10, 11, 12, 345e6, time.Local)
	var tick atomic.Uint64
	ag, err := agent.New(agent.Options{
		Client: apiclient.NewClient(url, tok, nil), Node: "n1", Version: "ui-test", Kernel: "6.18.15", Interval: time.Second,
		Applier: applier.New(applier.NewRecorder(), proc, t.TempDir(), nil),
		Mode:    agent.ModeSchedule, SchedulerState: func() string { return "enabled (swiftlane)" },
		Stats: func() (*apitypes.Counters, error) { return syntheticCounters(tick.Add(1)), nil },
		// What automatic mode would report (the VM tests trace real GTP-U).
		Carriers: func() []apitypes.Carrier {
			return []apitypes.Carrier{{PID: 4242, Command: "nr-gnb", Class: "critical", Function: "gtp_encap_recv",
				Since: lastPacket.Add(-time.Minute), LastPacket: lastPacket, Packets: 120000, PacketsPerSecond: 2000}}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	go ag.Run(ctx)

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1000),
	}
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()

	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		// The page re-renders its tables on a refresh timer; a click that lands
		// while a row is being replaced hits a node that no longer exists.
		// Steps are idempotent per attempt, so try a stale step again.
		var err error
		for attempt := 0; attempt < 3; attempt++ {
			if err = chromedp.Do(bctx, steps...); err == nil || !strings.Contains(err.Error(), "Could not find node") {
				break
			}
		}
		if err != nil {
			t.Fatalf("browser: %s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Text(css(sel)))
		if err != nil {
			t.Fatalf("browser: text of %s: %v", sel, err)
		}
		return s
	}
	shot := func(name string) {
		t.Helper()
		buf, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		p := filepath.Join(shots, name)
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s", p)
	}

	// A wrong password is refused with a message.
	do("login page",
		chromedp.Navigate(url+"/"),
		chromedp.WaitVisible(css("#login-form")),
		chromedp.SendKeys(css("#login-password"), "wrong"),
		chromedp.Click(css("#login-submit")),
		chromedp.WaitVisible(css("#login-error:not(:empty)")))
	loginErr := text("#login-error")
	shot("ui-login.png")
	do("log in",
		chromedp.SetValue(css("#login-password"), bootstrap),
		chromedp.Click(css("#login-submit")),
		chromedp.WaitVisible(css(`#nodes-table tr[data-node="n1"]`)))

	// An invalid regex: the server's message appears at the field.
	do("invalid strategy",
		chromedp.Click(css("#tab-strategies")),
		chromedp.WaitVisible(css("#strategy-form")),
		chromedp.SetValue(css("#f-name"), "gnb"),
		chromedp.SetValue(css("#f-class"), "critical"),
		chromedp.SetValue(css("#f-command_regex"), "nr-gnb("),
		chromedp.SetValue(css("#f-execution_time"), "20000000"),
		chromedp.Click(css("#f-submit")),
		chromedp.WaitVisible(css("#f-command_regex.invalid")))
	formErr := text("#form-error")
	shot("ui-validation.png")
	// Fixed, it is created.
	do("create strategy",
		chromedp.SetValue(css("#f-command_regex"), "nr-gnb|nr-ue"),
		chromedp.Click(css("#f-submit")),
		chromedp.WaitVisible(css(`#strategies-table tr[data-strategy="gnb"]`)))
	// Pod selectors on a server without Kubernetes: saved, with the
	// server's warning under the form and in the table.
	do("strategy with pod selectors",
		chromedp.SetValue(css("#f-name"), "by-label"),
		chromedp.SetValue(css("#f-class"), "normal"),
		chromedp.SetValue(css("#f-command_regex"), "no-such-process"),
		chromedp.SetValue(css("#f-selectors"), "app=ueransim"),
		chromedp.Click(css("#f-submit")),
		chromedp.WaitVisible(css(`#strategies-table tr[data-strategy="by-label"] .warning`)))
	formWarn := text("#form-warning")
	rowWarn := text(`#strategies-table tr[data-strategy="by-label"] .warning`)
	shot("ui-strategies.png")

	// The agent resolves it; the node shows the process and the chart.
	do("node detail",
		chromedp.Click(css("#tab-nodes")),
		chromedp.WaitVisible(css(`#nodes-table tr[data-node="n1"]`)),
		chromedp.Click(css(`#nodes-table tr[data-node="n1"]`)),
		chromedp.WaitVisible(css("#workloads-table tbody tr")),
		chromedp.WaitVisible(css("#carriers-table tbody tr")),
		chromedp.WaitVisible(css("#unmatchable-table tbody tr")),
		chromedp.WaitVisible(css("#latency-table tbody tr")))
	workloads := text("#workloads-table tbody")
	unmatchable := text("#unmatchable-table tbody")
	carriers := text("#carriers-table tbody")
	nodeRow := text(`#nodes-table tr[data-node="n1"]`)
	shot("ui-node.png")

	// Edit: the class changes in the table and, once the agent has it, on the node.
	do("edit strategy",
		chromedp.Click(css("#tab-strategies")),
		chromedp.Click(css(`#strategies-table button[data-edit="gnb"]`)),
		chromedp.WaitVisible(css("#f-cancel")),
		chromedp.SetValue(css("#f-class"), "high"),
		chromedp.Click(css("#f-submit")),
		chromedp.WaitNotVisible(css("#f-cancel")),
		chromedp.Click(css("#tab-nodes")),
		chromedp.WaitVisible(css(`#workloads-table tbody tr[data-class="high"]`)))
	// Delete (two clicks): the row goes, and so does the workload.
	do("open strategies",
		chromedp.Click(css("#tab-strategies")),
		chromedp.WaitVisible(css(`#strategies-table button[data-delete="gnb"]`)))
	// Both clicks in one script task, so the refresh timer cannot re-render
	// (and disarm) the button between them; the first arms, the second deletes.
	if deleted, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`(() => {
		const b = document.querySelector('#strategies-table button[data-delete="gnb"]');
		b.click();
		if (!b.classList.contains("armed")) return false;
		b.click();
		return true;
	})()`)); err != nil || !deleted {
		t.Fatalf("browser: delete strategy: the first click did not arm the button (%v)", err)
	}
	do("delete strategy",
		chromedp.WaitNotPresent(css(`#strategies-table tr[data-strategy="gnb"]`)),
		chromedp.Click(css("#tab-nodes")),
		chromedp.WaitVisible(css("#workloads-empty")))

	if !strings.Contains(loginErr, "wrong user name or password") {
		t.Errorf("login error shown: %q", loginErr)
	}
	if !strings.Contains(formErr, "command_regex") || !strings.Contains(formErr, "RE2") {
		t.Errorf("validation message shown: %q", formErr)
	}
	if !strings.Contains(formWarn, "selectors:") || !strings.Contains(rowWarn, "no pod information") {
		t.Errorf("selector warning shown: form %q, table %q", formWarn, rowWarn)
	}
	if !strings.Contains(workloads, "4242") || !strings.Contains(workloads, "gnb") || !strings.Contains(workloads, "nr-gnb -c gnb.yaml") {
		t.Errorf("workloads shown: %q", workloads)
	}
	if !strings.Contains(carriers, "4242") || !strings.Contains(carriers, "nr-gnb") || !strings.Contains(carriers, "2000") ||
		!strings.Contains(carriers, "10:11:12.345") {
		t.Errorf("carriers shown: %q", carriers)
	}
	// The REST agent has no pod source: the selectors strategy matches
	// nothing on the node, and its heartbeat says so.
	if !strings.Contains(unmatchable, "by-label") || !strings.Contains(unmatchable, "selectors_without_pod_source") || !strings.Contains(unmatchable, "command_regex") {
		t.Errorf("unmatchable strategies shown: %q", unmatchable)
	}
	if !strings.Contains(nodeRow, "healthy") || !strings.Contains(nodeRow, "schedule") {
		t.Errorf("node row: %q", nodeRow)
	}
}

// syntheticCounters grow with each heartbeat so the UI shows live rates and
// a histogram per class (critical waits short, background long).
func syntheticCounters(n uint64) *apitypes.Counters {
	c := &apitypes.Counters{
		Enqueued:     map[string]uint64{"critical": 900 * n, "high": 300 * n, "normal": 5000 * n, "background": 1200 * n},
		Dispatched:   map[string]uint64{"direct": 4000 * n, "shared": 2000 * n, "critical": 900 * n, "kthread": 500 * n},
		PreemptKicks: 40 * n, WakeupPreempts: 60 * n,
		RunqueueWait: map[string]apitypes.WaitHistogram{},
	}
	centre := map[string]int{"critical": 3, "high": 6, "normal": 10, "background": 14}
	for class, mid := range centre {
		h := apitypes.WaitHistogram{Buckets: make([]uint64, 28)}
		for i := range h.Buckets {
			d := i - mid
			if d < 0 {
				d = -d
			}
			if d < 5 {
				h.Buckets[i] = n * uint64(100>>d)
				h.Count += h.Buckets[i]
				h.SumNs += h.Buckets[i] * (1 << i) * 700
			}
		}
		c.RunqueueWait[class] = h
	}
	return c
}
