// SPDX-License-Identifier: Apache-2.0

package api

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/store"
)

// feedSize is how many recent changes the feed keeps.
const feedSize = 512

// feed shares the store's recent changes among the watch streams: after a
// write, the first stream to look reads the change log once and encodes
// each event once; the other streams (hundreds of agents) reuse both
// instead of each reading the store and encoding the same event.
type feed struct {
	mu    sync.Mutex
	valid bool
	gen   uint64 // hub generation the feed is current for
	start uint64 // items hold every change in (start, head]
	head  uint64
	items []feedItem
}

type feedItem struct {
	ch    store.Change
	frame []byte // the SSE event as sent
}

func sseFrame(ev apitypes.WatchEvent) ([]byte, error) {
	data, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	return fmt.Appendf(nil, "id: %d\nevent: %s\ndata: %s\n\n", ev.Revision, ev.Type, data), nil
}

func eventOf(ch store.Change) apitypes.WatchEvent {
	return apitypes.WatchEvent{Type: string(ch.Type), Revision: ch.Revision, Name: ch.Name, Strategy: ch.Strategy}
}

// changes returns up to watchBatch changes after since, with their frames.
// A revision outside the feed (older than it keeps, or unknown) is read
// from the store, which also reports store.ErrCompacted for it.
func (s *Server) changes(ctx context.Context, since uint64) ([]feedItem, error) {
	f := &s.feed
	gen := s.hub.generation() // before reading: a later write bumps it
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.valid || f.gen != gen {
		from := f.head
		if !f.valid {
			from = since
		}
		chs, rev, err := s.o.Store.Changes(ctx, from, watchBatch)
		if err != nil {
			f.valid = false
			if f.items != nil && since >= f.start && since <= f.head {
				return nil, err
			}
			return s.changesUncached(ctx, since)
		}
		if !f.valid {
			f.items, f.start, f.head = f.items[:0], from, from
		}
		for _, ch := range chs {
			frame, err := sseFrame(eventOf(ch))
			if err != nil {
				return nil, err
			}
			f.items = append(f.items, feedItem{ch: ch, frame: frame})
			f.head = ch.Revision
		}
		if len(chs) < watchBatch {
			f.head = max(f.head, rev)
			f.gen = gen
		} else {
			f.gen = gen - 1 // more to read: not current yet
		}
		f.valid = true
		if over := len(f.items) - feedSize; over > 0 {
			f.start = f.items[over-1].ch.Revision
			f.items = append(f.items[:0:0], f.items[over:]...)
		}
	}
	if since < f.start || since > f.head {
		return s.changesUncached(ctx, since)
	}
	i := 0
	for i < len(f.items) && f.items[i].ch.Revision <= since {
		i++
	}
	n := min(len(f.items)-i, watchBatch)
	return append([]feedItem(nil), f.items[i:i+n]...), nil
}

// changesUncached reads and encodes changes for one stream.
func (s *Server) changesUncached(ctx context.Context, since uint64) ([]feedItem, error) {
	chs, _, err := s.o.Store.Changes(ctx, since, watchBatch)
	if err != nil {
		return nil, err
	}
	out := make([]feedItem, len(chs))
	for i, ch := range chs {
		frame, err := sseFrame(eventOf(ch))
		if err != nil {
			return nil, err
		}
		out[i] = feedItem{ch: ch, frame: frame}
	}
	return out, nil
}
