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
	"time"
)

// Errors callers test with errors.Is.
var (
	ErrNotFound = errors.New("not found")
	ErrExists   = errors.New("already exists")
	// ErrCompacted means the change log no longer reaches back to the asked
	// revision (or the revision is from another store): list and start over.
	ErrCompacted = errors.New("revision compacted")
)

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
	// ReplaceStrategies makes list the whole set in one write (the
	// generation-1 API's semantics) and returns the result.
	ReplaceStrategies(ctx context.Context, list []Strategy) ([]Strategy, uint64, error)
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
