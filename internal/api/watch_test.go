// SPDX-License-Identifier: Apache-2.0

package api

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/apiclient"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
)

// watcher runs Client.Watch in the background and hands events over.
func watcher(t *testing.T, c *apiclient.Client, since uint64) (<-chan apitypes.WatchEvent, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan apitypes.WatchEvent, 1024)
	connected := make(chan struct{})
	go func() {
		_ = c.Watch(ctx, since, func() { close(connected) }, func(ev apitypes.WatchEvent) error {
			ch <- ev
			return nil
		})
		close(ch)
	}()
	select {
	case <-connected:
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not connect")
	}
	t.Cleanup(cancel)
	return ch, cancel
}

func next(t *testing.T, ch <-chan apitypes.WatchEvent) apitypes.WatchEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch ended")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event within 10 s")
	}
	return apitypes.WatchEvent{}
}

// apply folds events into a name -> strategy map.
func apply(state map[string]apitypes.Strategy, ev apitypes.WatchEvent) {
	switch ev.Type {
	case "sync":
		clear(state)
		for _, s := range ev.Strategies {
			state[s.Name] = s
		}
	case "put":
		state[ev.Name] = *ev.Strategy
	case "delete":
		delete(state, ev.Name)
	}
}

func TestWatchResumesWithoutGapsOrDuplicates(t *testing.T) {
	eachStore(t, testWatchResumesWithoutGapsOrDuplicates)
}

func testWatchResumesWithoutGapsOrDuplicates(t *testing.T, bk backend) {
	ts := startServer(t, t.TempDir(), serverOpt{backend: bk})
	admin := ts.client(ts.token(auth.Admin, ""))
	agent := ts.client(ts.token(auth.Agent, "n1"))
	// revs are the revisions of the writes, in order: the events must carry
	// exactly these (bolt counts 1, 2, ...; Kubernetes has etcd's, with gaps).
	var revs []uint64
	wrote := func(rev uint64, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if len(revs) > 0 && rev <= revs[len(revs)-1] {
			t.Fatalf("write at revision %d after %d", rev, revs[len(revs)-1])
		}
		revs = append(revs, rev)
	}
	create := func(name string) {
		t.Helper()
		s, err := admin.CreateStrategy(bg(), critical(name, "x"))
		wrote(s.Revision, err)
	}
	for i := range 5 {
		create(fmt.Sprintf("s%d", i))
	}
	state := map[string]apitypes.Strategy{}
	ch, cancel := watcher(t, agent, 0)
	ev := next(t, ch)
	if ev.Type != "sync" || ev.Revision != revs[4] || len(ev.Strategies) != 5 {
		t.Fatalf("first event (want revision %d): %+v", revs[4], ev)
	}
	apply(state, ev)
	last := ev.Revision
	for i := 5; i < 10; i++ {
		create(fmt.Sprintf("s%d", i))
	}
	for _, want := range revs[5:] {
		ev := next(t, ch)
		if ev.Revision != want || ev.Type != "put" {
			t.Fatalf("after %d got %+v, want a put at %d", last, ev, want)
		}
		apply(state, ev)
		last = ev.Revision
	}
	cancel()
	for range ch { // drain until the stream is gone
	}

	// Changes while disconnected.
	d, err := admin.DeleteStrategy(bg(), "s0")
	wrote(d.Revision, err)
	up, err := admin.PutStrategy(bg(), critical("s1", "changed"))
	wrote(up.Revision, err)
	create("s10")
	ch, _ = watcher(t, agent, last)
	for i, want := range []string{"delete s0", "put s1", "put s10"} {
		ev := next(t, ch)
		if fmt.Sprintf("%s %s", ev.Type, ev.Name) != want || ev.Revision != revs[10+i] {
			t.Fatalf("resumed after %d: got %s %s @%d, want %s @%d", last, ev.Type, ev.Name, ev.Revision, want, revs[10+i])
		}
		apply(state, ev)
		last = ev.Revision
	}
	list, _ := admin.ListStrategies(bg())
	if len(list.Strategies) != len(state) {
		t.Fatalf("watch state has %d strategies, server %d", len(state), len(list.Strategies))
	}
	for _, s := range list.Strategies {
		if mustJSON(state[s.Name]) != mustJSON(s) {
			t.Fatalf("watch state differs for %s: %+v vs %+v", s.Name, state[s.Name], s)
		}
	}
	select {
	case ev := <-ch:
		t.Fatalf("unexpected extra event %+v", ev)
	default:
	}
}

func TestWatchAfterCompactionResyncs(t *testing.T) { eachStore(t, testWatchAfterCompactionResyncs) }

func testWatchAfterCompactionResyncs(t *testing.T, bk backend) {
	ts := startServer(t, t.TempDir(), serverOpt{backend: bk, logSize: 3})
	admin := ts.client(ts.token(auth.Admin, ""))
	var first, last apitypes.StrategyView
	for i := range 8 {
		s, err := admin.CreateStrategy(bg(), critical(fmt.Sprintf("s%d", i), "x"))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = s
		}
		last = s
	}
	// Too old (the log holds the last 3 changes); from another server.
	for _, since := range []uint64{first.Revision, last.Revision + 1000} {
		ch, _ := watcher(t, admin, since)
		if ev := next(t, ch); ev.Type != "sync" || ev.Revision != last.Revision || len(ev.Strategies) != 8 {
			t.Fatalf("resume from %d: %+v, want a sync at %d", since, ev, last.Revision)
		}
	}
}

func TestWatchTurnsUnselectedIntoDelete(t *testing.T) {
	eachStore(t, testWatchTurnsUnselectedIntoDelete)
}

func testWatchTurnsUnselectedIntoDelete(t *testing.T, bk backend) {
	ts := startServer(t, t.TempDir(), serverOpt{backend: bk})
	admin := ts.client(ts.token(auth.Admin, ""))
	agent := ts.client(ts.token(auth.Agent, "n1"))
	if _, err := agent.RegisterNode(bg(), "n1", apitypes.Registration{Mode: "observe", HeartbeatSeconds: 5, Labels: map[string]string{"zone": "a"}}); err != nil {
		t.Fatal(err)
	}
	ch, _ := watcher(t, agent, 0)
	next(t, ch) // empty sync
	s := critical("moving", "x")
	s.NodeSelector = map[string]string{"zone": "a"}
	if _, err := admin.CreateStrategy(bg(), s); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, ch); ev.Type != "put" {
		t.Fatalf("selected: %+v", ev)
	}
	s.NodeSelector["zone"] = "b"
	if _, err := admin.PutStrategy(bg(), s); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, ch); ev.Type != "delete" || ev.Name != "moving" || ev.Strategy != nil {
		t.Fatalf("moved away: %+v", ev)
	}
}

// TestWatchOutlivesWriteTimeout: the server's write timeout (config
// timeouts.write) bounds ordinary responses, not watch streams: a stream
// open for longer still delivers the next change.
func TestWatchOutlivesWriteTimeout(t *testing.T) {
	ts := startServer(t, t.TempDir(), serverOpt{timeouts: Timeouts{Write: 100 * time.Millisecond}, keepAlive: 20 * time.Millisecond})
	admin := ts.token(auth.Admin, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.url+"/api/v1/watch/strategies", nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	// Ten keep-alive comments (20 ms apart): past the 100 ms write timeout.
	for n := 0; n < 10; {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended after %d keep-alives: %v", n, err)
		}
		if strings.HasPrefix(line, ":") {
			n++
		}
	}
	if _, err := ts.client(admin).CreateStrategy(bg(), critical("late", "x")); err != nil {
		t.Fatal(err)
	}
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended before the put: %v", err)
		}
		if strings.HasPrefix(line, "event: put") {
			return
		}
	}
}

// TestManyWatchersShareTheFeed: streams that share the server's change feed
// each get every change exactly once and in order, while writers race them,
// whether they started before the writes, in the middle, or resume from a
// revision the feed already moved past the start of.
func TestManyWatchersShareTheFeed(t *testing.T) {
	ts := startServer(t, t.TempDir(), serverOpt{})
	admin := ts.client(ts.token(auth.Admin, ""))
	const writers, perWriter = 4, 25
	type stream struct {
		ch    <-chan apitypes.WatchEvent
		since uint64
	}
	var streams []stream
	for range 10 {
		ch, _ := watcher(t, admin, 0)
		streams = append(streams, stream{ch: ch})
	}
	done := make(chan error, writers)
	for w := range writers {
		go func() {
			for i := range perWriter {
				_, err := admin.PutStrategy(bg(), critical(fmt.Sprintf("w%d-%d", w, i%5), fmt.Sprintf("x%d", i)))
				if err != nil {
					done <- err
					return
				}
				if i == perWriter/2 && w == 0 {
					done <- nil // signal the midpoint once below
				}
			}
			done <- nil
		}()
	}
	<-done // the midpoint (or a writer's end): start more streams now
	for _, since := range []uint64{0, 3} {
		ch, _ := watcher(t, admin, since)
		streams = append(streams, stream{ch: ch, since: since})
	}
	for range writers {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	l, err := admin.ListStrategies(bg())
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range streams {
		last := s.since
		for last < l.Revision {
			ev := next(t, s.ch)
			if ev.Type == "sync" {
				last = ev.Revision
				continue
			}
			if ev.Revision != last+1 {
				t.Fatalf("stream %d: revision %d after %d (a gap or a duplicate)", i, ev.Revision, last)
			}
			last = ev.Revision
		}
	}
}
