// SPDX-License-Identifier: Apache-2.0

package api

import (
	"testing"

	"github.com/swiftlane/swiftlane/internal/auth"
)

func TestWatchAheadOfStoreWaits(t *testing.T) { eachStore(t, testWatchAheadOfStoreWaits) }

// testWatchAheadOfStoreWaits: a watch resumed from a revision the store has
// not reached (an agent failing over from a replica whose store was a
// moment ahead) waits for it, and gets the change after it as a change: not
// a sync from behind what the client has already applied.
func testWatchAheadOfStoreWaits(t *testing.T, bk backend) {
	ts := startServer(t, t.TempDir(), serverOpt{backend: bk})
	admin := ts.client(ts.token(auth.Admin, ""))
	s, err := admin.CreateStrategy(bg(), critical("a", "x"))
	if err != nil {
		t.Fatal(err)
	}
	ch, _ := watcher(t, ts.client(ts.token(auth.Agent, "n1")), s.Revision+1)
	// The write that reaches the watcher's revision (bolt counts by one;
	// etcd's revision moves by one at least), then one after it.
	w1, err := admin.PutStrategy(bg(), critical("a", "y"))
	if err != nil {
		t.Fatal(err)
	}
	w2, err := admin.PutStrategy(bg(), critical("a", "z"))
	if err != nil {
		t.Fatal(err)
	}
	want := w2.Revision
	if w1.Revision > s.Revision+1 {
		want = w1.Revision // etcd skipped past the watcher's revision
	}
	if ev := next(t, ch); ev.Type != "put" || ev.Revision != want {
		t.Fatalf("first event %s at %d, want the put at %d (writes at %d, %d; resumed from %d)", ev.Type, ev.Revision, want, w1.Revision, w2.Revision, s.Revision+1)
	}
}
