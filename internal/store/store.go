// SPDX-License-Identifier: Apache-2.0

// Package store keeps the control plane's state: strategies with a change
// log that watches resume from, and registered nodes with their last status.
// Store is the interface the API server uses, in the API's types
// (internal/apitypes); Open returns the embedded default (one bbolt file,
// whose records are this package's own). Other backends (e.g. Kubernetes
// CRDs) implement the same interface and convert at their boundary too.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/swiftlane/swiftlane/internal/apitypes"
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
	// ErrBusy means a write kept conflicting with other writers (other API
	// replicas) until its deadline; nothing was written, it may be retried.
	ErrBusy = errors.New("busy: other writers kept changing the object")
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

// ChangeType says what happened to a strategy.
type ChangeType string

const (
	Put    ChangeType = "put"
	Delete ChangeType = "delete"
)

// Change is one entry of the strategy change log that watches replay.
type Change struct {
	Revision uint64
	Type     ChangeType
	Name     string
	// Strategy is the new value (put only).
	Strategy *apitypes.Strategy
}

// Store is the control plane's state. Every write is durable when it
// returns. Implementations are safe for concurrent use.
type Store interface {
	// ListStrategies returns every strategy in precedence order and the
	// store revision the list is at.
	ListStrategies(ctx context.Context) ([]apitypes.Strategy, uint64, error)
	GetStrategy(ctx context.Context, name string) (apitypes.Strategy, error)
	// CreateStrategy fails with ErrExists if the name is taken.
	CreateStrategy(ctx context.Context, s apitypes.Strategy) (apitypes.Strategy, error)
	// UpdateStrategy fails with ErrNotFound if the name is unknown.
	UpdateStrategy(ctx context.Context, s apitypes.Strategy) (apitypes.Strategy, error)
	// DeleteStrategy returns the revision of the deletion.
	DeleteStrategy(ctx context.Context, name string) (uint64, error)
	// ReplaceStrategies makes list the set of strategies owner owns (the
	// generation-1 API's "replace all", scoped to one client) in one write,
	// and returns every strategy. Strategies of other owners are untouched;
	// a name in list that another owner has fails with ErrOwned.
	ReplaceStrategies(ctx context.Context, owner string, list []apitypes.Strategy) ([]apitypes.Strategy, uint64, error)
	// Changes returns up to limit changes after revision after, oldest first,
	// and the current revision.
	Changes(ctx context.Context, after uint64, limit int) ([]Change, uint64, error)

	// RegisterNode creates or refreshes a node's registration.
	RegisterNode(ctx context.Context, name string, r apitypes.Registration, now time.Time) (apitypes.Node, error)
	// Heartbeat records a status; ErrNotFound if the node never registered.
	Heartbeat(ctx context.Context, name string, h apitypes.Heartbeat, now time.Time) (apitypes.Node, error)
	GetNode(ctx context.Context, name string) (apitypes.Node, error)
	ListNodes(ctx context.Context) ([]apitypes.Node, error)
	DeleteNode(ctx context.Context, name string) error

	// RevokeToken and TokenRevoked keep the token deny list (auth.DenyList)
	// that every API process on the store reads.
	RevokeToken(ctx context.Context, id string, until time.Time, by string) error
	TokenRevoked(id string) (bool, error)

	// AppendAudit adds e to the audit history and returns it with its ID.
	// The history keeps the newest entries up to the store's bound
	// (DefaultAuditSize unless configured); older ones are dropped.
	AppendAudit(ctx context.Context, e apitypes.AuditEntry) (apitypes.AuditEntry, error)
	// ListAudit returns up to q.Limit entries matching q, newest first, and
	// whether older matching entries remain.
	ListAudit(ctx context.Context, q apitypes.AuditQuery) ([]apitypes.AuditEntry, bool, error)

	Close() error
}
