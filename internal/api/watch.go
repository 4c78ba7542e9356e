// SPDX-License-Identifier: Apache-2.0

package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/store"
)

// watchBatch bounds how many changes one store read returns.
const watchBatch = 1000

// aheadWait bounds how long a watch resumed from a revision this server's
// store has not reached waits for it before resynchronising the client.
const aheadWait = time.Second

// watch streams strategy changes as server-sent events. The watcher
// subscribes before it reads the change log, so a write that lands between
// the read and the wait still wakes it: nothing is missed, and since every
// event carries its revision and the log is read strictly after the last
// one sent, nothing is sent twice.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, c *auth.Claims) error {
	since, err := resumeRevision(r)
	if err != nil {
		return err
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		return errorf(http.StatusInternalServerError, "", "", "streaming unsupported")
	}
	// A stream outlives the server's write timeout by design: lift it for
	// this response (read deadlines are already over once a handler runs).
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	sub := s.hub.subscribe()
	defer s.hub.unsubscribe(sub)

	var labels map[string]string
	agent := c != nil && c.Role == auth.Agent
	if agent {
		labels = s.nodeLabels(r.Context(), c.Node)
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	h.Set(apitypes.WatchKeepAliveHeader, s.o.KeepAlive.String())
	w.WriteHeader(http.StatusOK)

	send := func(ev apitypes.WatchEvent) error {
		data, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.Revision, ev.Type, data)
		return err
	}
	keepAlive := func() bool {
		if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
			return false
		}
		fl.Flush()
		return true
	}
	sync := since == 0
	// A resume point ahead of the store is, on the Kubernetes store, one
	// another replica already served (an agent failing over): its watch of
	// the apiserver is milliseconds behind. Waiting for it keeps the agent
	// from a sync older than what it applied, then each change again.
	var ahead <-chan time.Time
	aheadDone := false
	keep := time.NewTicker(s.o.KeepAlive)
	defer keep.Stop()
	for {
		if sync {
			list, rev, err := s.o.Store.ListStrategies(r.Context())
			if err != nil {
				return nil // headers are out; the client reconnects
			}
			if agent {
				list = filterForNode(list, labels)
			}
			if err := send(apitypes.WatchEvent{Type: "sync", Revision: rev, Strategies: nonNil(list)}); err != nil {
				return nil
			}
			since, sync = rev, false
		}
		changes, err := s.changes(r.Context(), since)
		if errors.Is(err, store.ErrCompacted) {
			if !aheadDone && s.ahead(r.Context(), since) {
				if ahead == nil {
					ahead = time.After(aheadWait)
					fl.Flush() // the headers: the client is connected
				}
				select {
				case <-sub:
					continue
				case <-keep.C: // the client's read deadline runs meanwhile
					if !keepAlive() {
						return nil
					}
					continue
				case <-ahead:
				case <-r.Context().Done():
					return nil
				}
			}
			aheadDone, sync = true, true
			continue
		}
		if err != nil {
			return nil
		}
		for _, it := range changes {
			ch := it.ch
			// For an agent, a strategy that no longer selects its node is a
			// deletion (the agent drops it if it had it).
			if agent && ch.Type == store.Put && !ch.Strategy.ForNode(labels) {
				err = send(apitypes.WatchEvent{Type: string(store.Delete), Revision: ch.Revision, Name: ch.Name})
			} else {
				_, err = w.Write(it.frame) // encoded once for every stream
			}
			if err != nil {
				return nil
			}
			since = ch.Revision
		}
		fl.Flush()
		if len(changes) == watchBatch {
			continue
		}
		select {
		case <-sub:
		case <-keep.C:
			if !keepAlive() {
				return nil
			}
		case <-r.Context().Done():
			return nil
		}
	}
}

// ahead says the store has not reached revision since yet.
func (s *Server) ahead(ctx context.Context, since uint64) bool {
	_, head, err := s.o.Store.Changes(ctx, since, 1)
	return errors.Is(err, store.ErrCompacted) && since > head
}

func filterForNode(list []apitypes.Strategy, labels map[string]string) []apitypes.Strategy {
	out := list[:0:0]
	for _, st := range list {
		if st.ForNode(labels) {
			out = append(out, st)
		}
	}
	return out
}

// resumeRevision reads ?revision= or the SSE Last-Event-ID header.
func resumeRevision(r *http.Request) (uint64, error) {
	v := r.URL.Query().Get("revision")
	field := "revision"
	if v == "" {
		v, field = r.Header.Get("Last-Event-ID"), "Last-Event-ID"
	}
	if v == "" {
		return 0, nil
	}
	rev, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, errorf(http.StatusBadRequest, field, "use a revision number from a previous event, or 0", "%q is not a revision", v)
	}
	return rev, nil
}
