// SPDX-License-Identifier: Apache-2.0

// Package store keeps the control plane's state: strategies with a change
// log that watches resume from, and registered nodes with their last status.
// Store is the interface the API server uses; Open returns the embedded
// default (one bbolt file). Other backends (e.g. Kubernetes CRDs) implement
// the same interface.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Errors callers test with errors.Is.
var (
	ErrNotFound = errors.New("not found")
	ErrExists   = errors.New("already exists")
	// ErrCompacted means the change log no longer reaches back to the asked
	// revision (or the revision is from another store): list and start over.
	ErrCompacted = errors.New("revision compacted")
	// ErrOwned means a strategy name belongs to another owner (another
	// generation-1 client, or the admin): a list replace may not take it.
	ErrOwned = errors.New("strategy name owned by another client")
)

// OwnedError is ErrOwned for one entry of a replaced list.
type OwnedError struct {
	Index int    // in the list
	Name  string // the strategy
	Owner string // who has it ("" for the admin)
}

func (e *OwnedError) Error() string {
	who := "an admin-made strategy"
	if e.Owner != "" {
		who = "a strategy of generation-1 client " + e.Owner
	}
	return fmt.Sprintf("strategies[%d].name: %q is %s", e.Index, e.Name, who)
}

func (e *OwnedError) Unwrap() error { return ErrOwned }

// Store is the control plane's state. Every write is durable when it
// returns. Implementations are safe for concurrent use.
type Store interface {
	// ListStrategies returns every strategy in precedence order and the
	// store revision the list is at.
	ListStrategies(ctx context.Context) ([]Strategy, uint64, error)
	GetStrategy(ctx context.Context, name string) (Strategy, error)
	// CreateStrategy fails with ErrExists if the name is taken.
	CreateStrategy(ctx context.Context, s Strategy) (Strategy, error)
	// UpdateStrategy fails with ErrNotFound if the name is unknown.
	UpdateStrategy(ctx context.Context, s Strategy) (Strategy, error)
	// DeleteStrategy returns the revision of the deletion.
	DeleteStrategy(ctx context.Context, name string) (uint64, error)
	// ReplaceStrategies makes list the set of strategies owner owns (the
	// generation-1 API's "replace all", scoped to one client) in one write,
	// and returns every strategy. Strategies of other owners are untouched;
	// a name in list that another owner has fails with ErrOwned.
	ReplaceStrategies(ctx context.Context, owner string, list []Strategy) ([]Strategy, uint64, error)
	// Changes returns up to limit changes after revision after, oldest first,
	// and the current revision.
	Changes(ctx context.Context, after uint64, limit int) ([]Change, uint64, error)

	// RegisterNode creates or refreshes a node's registration.
	RegisterNode(ctx context.Context, name string, r Registration, now time.Time) (Node, error)
	// Heartbeat records a status; ErrNotFound if the node never registered.
	Heartbeat(ctx context.Context, name string, h Heartbeat, now time.Time) (Node, error)
	GetNode(ctx context.Context, name string) (Node, error)
	ListNodes(ctx context.Context) ([]Node, error)
	DeleteNode(ctx context.Context, name string) error

	Close() error
}
