// SPDX-License-Identifier: Apache-2.0

package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

func strat(name, re string) apitypes.Strategy {
	c := strategy.Critical
	return apitypes.Strategy{Strategy: strategy.Strategy{Name: name, Class: &c, CommandRegex: re}}
}

func TestStrategiesSurviveReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.CreateStrategy(ctx, strat("a", "x"))
	if err != nil || a.Revision != 1 || a.CreatedRevision != 1 {
		t.Fatalf("create: %+v %v", a, err)
	}
	if _, err := s.CreateStrategy(ctx, strat("a", "y")); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate create: %v", err)
	}
	if _, err := s.UpdateStrategy(ctx, strat("nope", "y")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("update unknown: %v", err)
	}
	if _, err := s.CreateStrategy(ctx, strat("b", "y")); err != nil {
		t.Fatal(err)
	}
	u, err := s.UpdateStrategy(ctx, strat("a", "z"))
	if err != nil || u.Revision != 3 || u.CreatedRevision != 1 {
		t.Fatalf("update: %+v %v", u, err)
	}
	if _, err := s.RegisterNode(ctx, "n1", apitypes.Registration{Mode: "observe", HeartbeatSeconds: 5}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Heartbeat(ctx, "n1", apitypes.Heartbeat{AppliedRevision: 3}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Heartbeat(ctx, "n2", apitypes.Heartbeat{}, time.Now()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("heartbeat before register: %v", err)
	}
	s.Close()

	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	list, rev, err := s.ListStrategies(ctx)
	if err != nil || rev != 3 || len(list) != 2 || list[0].Name != "a" || list[0].CommandRegex != "z" {
		t.Fatalf("after reopen: rev %d %+v %v", rev, list, err)
	}
	n, err := s.GetNode(ctx, "n1")
	if err != nil || n.AppliedRevision != 3 || n.Mode != "observe" {
		t.Fatalf("node after reopen: %+v %v", n, err)
	}
	ch, _, err := s.Changes(ctx, 1, 0)
	if err != nil || len(ch) != 2 || ch[0].Revision != 2 || ch[1].Name != "a" {
		t.Fatalf("changes: %+v %v", ch, err)
	}
}

func TestChangeLogCompaction(t *testing.T) {
	ctx := context.Background()
	s, err := OpenWithLogSize(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 0; i < 6; i++ {
		if _, err := s.CreateStrategy(ctx, strat(string(rune('a'+i)), "x")); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Changes(ctx, 1, 0); !errors.Is(err, ErrCompacted) {
		t.Fatalf("old revision: %v", err)
	}
	if _, _, err := s.Changes(ctx, 99, 0); !errors.Is(err, ErrCompacted) {
		t.Fatalf("future revision: %v", err)
	}
	ch, rev, err := s.Changes(ctx, 3, 0)
	if err != nil || rev != 6 || len(ch) != 3 {
		t.Fatalf("resumable revision: %d %+v %v", rev, ch, err)
	}
}

func TestReplaceKeepsUnchangedAndOrder(t *testing.T) {
	ctx := context.Background()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, _, err := s.ReplaceStrategies(ctx, "", []apitypes.Strategy{strat("a", "x"), strat("b", "y")}); err != nil {
		t.Fatal(err)
	}
	// Same list again: nothing changes.
	_, rev, err := s.ReplaceStrategies(ctx, "", []apitypes.Strategy{strat("a", "x"), strat("b", "y")})
	if err != nil || rev != 2 {
		t.Fatalf("idempotent replace: rev %d %v", rev, err)
	}
	// New order and one dropped: b first, c added, a deleted.
	list, _, err := s.ReplaceStrategies(ctx, "", []apitypes.Strategy{strat("b", "y"), strat("c", "z")})
	if err != nil || len(list) != 2 || list[0].Name != "b" || list[1].Name != "c" {
		t.Fatalf("replace: %+v %v", list, err)
	}
	if _, err := s.GetStrategy(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a should be gone: %v", err)
	}
}

// TestReplaceIsScopedToItsOwner: a list replace touches only its owner's
// strategies and refuses names others have.
func TestReplaceIsScopedToItsOwner(t *testing.T) {
	ctx := context.Background()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateStrategy(ctx, strat("admin", "x")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ReplaceStrategies(ctx, "op1", []apitypes.Strategy{strat("a", "x"), strat("b", "y")}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ReplaceStrategies(ctx, "op2", []apitypes.Strategy{strat("c", "z")}); err != nil {
		t.Fatal(err)
	}
	list, _, err := s.ReplaceStrategies(ctx, "op1", []apitypes.Strategy{strat("b", "y2")})
	var names []string
	for _, st := range list {
		names = append(names, st.Name+"/"+st.Owner)
	}
	if err != nil || strings.Join(names, ",") != "admin/,c/op2,b/op1" {
		t.Fatalf("after op1's second replace: %v %v", names, err)
	}
	_, rev, _ := s.ListStrategies(ctx)
	var owned *OwnedError
	if _, _, err := s.ReplaceStrategies(ctx, "op1", []apitypes.Strategy{strat("admin", "q")}); !errors.As(err, &owned) || owned.Owner != "" || owned.Index != 0 {
		t.Fatalf("taking the admin's name: %v", err)
	}
	if _, r, _ := s.ListStrategies(ctx); r != rev {
		t.Fatalf("refused replace wrote: %d -> %d", rev, r)
	}
}
