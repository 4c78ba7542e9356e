// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/apiclient"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
)

// freezer forwards TCP connections to a server until frozen; from then on
// it forwards nothing either way and closes nothing, which is how a replica
// whose host vanished (or a partition) looks to its clients: no FIN, no
// RST, only silence.
type freezer struct {
	addr   string
	frozen chan struct{}
	freeze func()
}

func freezeProxy(t *testing.T, backend string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{addr: ln.Addr().String(), frozen: make(chan struct{})}
	f.freeze = sync.OnceFunc(func() { close(f.frozen) })
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			select {
			case <-f.frozen:
				continue // accepted, never answered
			default:
			}
			b, err := net.Dial("tcp", backend)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, b)
			mu.Unlock()
			go f.pipe(c, b)
			go f.pipe(b, c)
		}
	}()
	return f
}

// pipe copies src to dst; once frozen it drops what it reads and leaves
// both connections open.
func (f *freezer) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-f.frozen:
			return
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

// TestAgentLeavesSilentReplica: the replica an agent watches goes silent
// without closing anything (its connections frozen mid-stream). The agent
// takes the stream for dead after apiclient.WatchIdle keep-alive periods
// with nothing read, moves to the other replica, and applies the change
// made meanwhile. Without a read deadline it would wait on the frozen
// stream forever.
func TestAgentLeavesSilentReplica(t *testing.T) {
	const keepAlive = 200 * time.Millisecond
	dir, reps, urls := twoReplicas(t, keepAlive)
	proxy := freezeProxy(t, reps[0].addr)
	tok := token(t, dir, auth.Agent, "n1")
	h := startAgentWith(t, "http://"+proxy.addr, tok, fakeProc(t, map[int]string{100: "nr-gnb"}), func(o *Options) {
		o.Failover = []*apiclient.Client{apiclient.NewClient(urls[1], tok, nil)}
	})
	h.waitApplied(t, 0)
	if got := h.agent.Server(); got != 0 {
		t.Fatalf("the agent started on server %d, want 0 (the proxied replica)", got)
	}
	admin := apiclient.NewClient(urls[1], token(t, dir, auth.Admin, ""), nil)
	frozen := time.Now()
	proxy.freeze()
	s, err := admin.CreateStrategy(context.Background(), crit("gnb", "nr-gnb"))
	if err != nil {
		t.Fatal(err)
	}
	h.waitApplied(t, s.Revision)
	took := time.Since(frozen)
	idle := apiclient.WatchIdle * keepAlive
	t.Logf("replica silent: the agent applied the change through the other %v later (read deadline %v)", took.Round(time.Millisecond), idle)
	if got := h.agent.Server(); got != 1 {
		t.Errorf("the agent applied it on server %d, want 1", got)
	}
	// The deadline, then a registration and a resumed watch on the other
	// replica (a few apiserver round trips, slow on a loaded host).
	if limit := idle + 5*time.Second; took > limit {
		t.Errorf("the agent left the silent replica after %v, want within %v", took, limit)
	}
}

// TestAgentRenewsThroughAnotherReplica: an agent's first replica is down
// when its token falls due; the renewal goes through the other replica
// (Connect's Renewer, as `swiftlane agent --server a,b` runs it), and the
// agent heartbeats past the old token's expiry without a restart.
func TestAgentRenewsThroughAnotherReplica(t *testing.T) {
	dir, reps, urls := twoReplicas(t, 0)
	reps[0].stop()
	// Due for renewal at once, in a token file (as an operator gives it).
	tok, exp := expiringToken(t, dir)
	file := filepath.Join(t.TempDir(), "agent.token")
	if err := os.WriteFile(file, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	client, failover, r, err := Connect(Servers{URLs: urls, Node: "n1", TokenFile: file})
	if err != nil {
		t.Fatal(err)
	}
	renewed := make(chan apitypes.TokenResponse, 16)
	r.OnRenew = func(tr apitypes.TokenResponse) { renewed <- tr }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	h := startAgentWith(t, urls[0], "", fakeProc(t, map[int]string{100: "nr-gnb"}), func(o *Options) {
		o.Client, o.Failover = client, failover
	})
	select {
	case <-renewed:
	case <-time.After(30 * time.Second):
		t.Fatal("the token was not renewed (the first replica is down; the second is up)")
	}
	h.waitBeatAfter(t, exp)
	if got := h.agent.Server(); got != 1 {
		t.Errorf("the agent is on server %d, want 1 (the first is down)", got)
	}
	noneRefused(t, urls[1], dir)
}
