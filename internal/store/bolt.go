// SPDX-License-Identifier: Apache-2.0

package store

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/swiftlane/swiftlane/internal/apitypes"
)

// FileName is the database file inside the data directory.
const FileName = "swiftlane.db"

// DefaultLogSize is how many changes the log keeps for watches to resume.
const DefaultLogSize = 10000

var (
	bStrategies = []byte("strategies")
	bChanges    = []byte("changes")
	bNodes      = []byte("nodes")
	bMeta       = []byte("meta")
	bRevoked    = []byte("revoked") // token id -> revocation (JSON)
	bAudit      = []byte("audit")   // sequence (big-endian) -> auditRecord (JSON)
	kRevision   = []byte("revision")
	kCompacted  = []byte("compacted") // highest revision dropped from the log
)

// Bolt is the embedded store: one bbolt file, fsynced on every commit.
type Bolt struct {
	db        *bolt.DB
	logSize   uint64
	auditSize uint64
}

// Options size a store's histories; zero fields take the defaults.
type Options struct {
	// LogSize is how many strategy changes the log keeps for watches
	// (DefaultLogSize).
	LogSize int
	// AuditSize is how many entries the audit history keeps
	// (apitypes.DefaultAuditSize).
	AuditSize int
}

// Open opens (creating if needed) the store in dir.
func Open(dir string) (*Bolt, error) {
	return OpenWith(dir, Options{})
}

// OpenWithLogSize is Open with a change-log length (tests use small ones).
func OpenWithLogSize(dir string, logSize int) (*Bolt, error) {
	return OpenWith(dir, Options{LogSize: max(logSize, 1)})
}

// OpenWith is Open with the histories' sizes.
func OpenWith(dir string, o Options) (*Bolt, error) {
	if o.LogSize <= 0 {
		o.LogSize = DefaultLogSize
	}
	if o.AuditSize <= 0 {
		o.AuditSize = apitypes.DefaultAuditSize
	}
	// A generous initial mapping avoids remaps while the file grows: a remap
	// waits for every open read, which would stall all watch streams at once.
	db, err := bolt.Open(filepath.Join(dir, FileName), 0o600, &bolt.Options{Timeout: 5 * time.Second, InitialMmapSize: 64 << 20})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("open store %s: locked by another process (is another `swiftlane api` using this --data-dir?)", filepath.Join(dir, FileName))
		}
		return nil, fmt.Errorf("open store: %w", err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bStrategies, bChanges, bNodes, bMeta, bRevoked, bAudit} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		// A smaller bound than the last run's applies at once.
		audit := tx.Bucket(bAudit)
		return dropOldestAudit(audit, audit.Stats().KeyN-o.AuditSize)
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open store: %w", err)
	}
	return &Bolt{db: db, logSize: uint64(o.LogSize), auditSize: uint64(o.AuditSize)}, nil
}

// Close releases the file.
func (b *Bolt) Close() error { return b.db.Close() }

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func getU64(bk *bolt.Bucket, k []byte) uint64 {
	v := bk.Get(k)
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

// nextRevision bumps the store revision inside a write transaction.
func nextRevision(tx *bolt.Tx) (uint64, error) {
	meta := tx.Bucket(bMeta)
	rev := getU64(meta, kRevision) + 1
	return rev, meta.Put(kRevision, u64(rev))
}

// logChange appends to the change log and drops entries beyond its length.
func (b *Bolt) logChange(tx *bolt.Tx, c Change) error {
	data, err := encodeChange(c)
	if err != nil {
		return err
	}
	bk := tx.Bucket(bChanges)
	if err := bk.Put(u64(c.Revision), data); err != nil {
		return err
	}
	if c.Revision <= b.logSize {
		return nil
	}
	keep := c.Revision - b.logSize // drop revisions <= keep
	cur := bk.Cursor()
	var dropped uint64
	for k, _ := cur.First(); k != nil && binary.BigEndian.Uint64(k) <= keep; k, _ = cur.Next() {
		dropped = binary.BigEndian.Uint64(k)
		if err := cur.Delete(); err != nil {
			return err
		}
	}
	if dropped > 0 {
		return tx.Bucket(bMeta).Put(kCompacted, u64(dropped))
	}
	return nil
}

func (b *Bolt) ListStrategies(_ context.Context) ([]apitypes.Strategy, uint64, error) {
	var list []apitypes.Strategy
	var rev uint64
	err := b.db.View(func(tx *bolt.Tx) error {
		rev = getU64(tx.Bucket(bMeta), kRevision)
		return tx.Bucket(bStrategies).ForEach(func(_, v []byte) error {
			s, err := decodeStrategy(v)
			if err != nil {
				return err
			}
			list = append(list, s)
			return nil
		})
	})
	apitypes.SortByPrecedence(list)
	return list, rev, err
}

func (b *Bolt) GetStrategy(_ context.Context, name string) (apitypes.Strategy, error) {
	var s apitypes.Strategy
	err := b.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bStrategies).Get([]byte(name))
		if v == nil {
			return ErrNotFound
		}
		var err error
		s, err = decodeStrategy(v)
		return err
	})
	return s, err
}

func (b *Bolt) putLocked(tx *bolt.Tx, s *apitypes.Strategy) error {
	rev, err := nextRevision(tx)
	if err != nil {
		return err
	}
	s.Revision = rev
	if s.CreatedRevision == 0 {
		s.CreatedRevision = rev
	}
	data, err := encodeStrategy(*s)
	if err != nil {
		return err
	}
	if err := tx.Bucket(bStrategies).Put([]byte(s.Name), data); err != nil {
		return err
	}
	c := *s
	return b.logChange(tx, Change{Revision: rev, Type: Put, Name: s.Name, Strategy: &c})
}

func (b *Bolt) CreateStrategy(_ context.Context, s apitypes.Strategy) (apitypes.Strategy, error) {
	err := b.db.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(bStrategies).Get([]byte(s.Name)) != nil {
			return ErrExists
		}
		s.CreatedRevision = 0
		return b.putLocked(tx, &s)
	})
	return s, err
}

func (b *Bolt) UpdateStrategy(_ context.Context, s apitypes.Strategy) (apitypes.Strategy, error) {
	err := b.db.Update(func(tx *bolt.Tx) error {
		old := tx.Bucket(bStrategies).Get([]byte(s.Name))
		if old == nil {
			return ErrNotFound
		}
		prev, err := decodeStrategy(old)
		if err != nil {
			return err
		}
		s.CreatedRevision = prev.CreatedRevision // keeps its precedence
		s.Owner = prev.Owner                     // and its generation-1 set
		return b.putLocked(tx, &s)
	})
	return s, err
}

func (b *Bolt) deleteLocked(tx *bolt.Tx, name string) (uint64, error) {
	if err := tx.Bucket(bStrategies).Delete([]byte(name)); err != nil {
		return 0, err
	}
	rev, err := nextRevision(tx)
	if err != nil {
		return 0, err
	}
	return rev, b.logChange(tx, Change{Revision: rev, Type: Delete, Name: name})
}

func (b *Bolt) DeleteStrategy(_ context.Context, name string) (uint64, error) {
	var rev uint64
	err := b.db.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(bStrategies).Get([]byte(name)) == nil {
			return ErrNotFound
		}
		var err error
		rev, err = b.deleteLocked(tx, name)
		return err
	})
	return rev, err
}

func (b *Bolt) ReplaceStrategies(ctx context.Context, owner string, list []apitypes.Strategy) ([]apitypes.Strategy, uint64, error) {
	want := map[string]bool{}
	for _, s := range list {
		if want[s.Name] {
			return nil, 0, fmt.Errorf("%w: strategy %q twice in one list", ErrExists, s.Name)
		}
		want[s.Name] = true
	}
	err := b.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bStrategies)
		var gone []string
		prev := map[string]apitypes.Strategy{}
		if err := bk.ForEach(func(k, v []byte) error {
			p, err := decodeStrategy(v)
			if err != nil {
				return err
			}
			prev[string(k)] = p
			if p.Owner == owner && !want[string(k)] {
				gone = append(gone, string(k))
			}
			return nil
		}); err != nil {
			return err
		}
		for i, s := range list {
			if p, ok := prev[s.Name]; ok && p.Owner != owner {
				return &OwnedError{Index: i, Name: s.Name, Owner: p.Owner}
			}
		}
		sort.Strings(gone)
		for _, name := range gone {
			if _, err := b.deleteLocked(tx, name); err != nil {
				return err
			}
		}
		// The list order is the precedence among the owner's strategies:
		// re-create every entry that is out of order.
		var last uint64 // created revision of the previous entry
		for i := range list {
			s := list[i]
			s.Owner = owner
			if p, ok := prev[s.Name]; ok {
				// Unchanged and still in order: no change event.
				s.Revision, s.CreatedRevision = p.Revision, p.CreatedRevision
				if sameStrategy(p, s) && (i == 0 || p.CreatedRevision > last) {
					list[i], last = p, p.CreatedRevision
					continue
				}
			}
			s.CreatedRevision = 0
			if err := b.putLocked(tx, &s); err != nil {
				return err
			}
			list[i], last = s, s.CreatedRevision
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	out, rev, err := b.ListStrategies(ctx)
	return out, rev, err
}

func (b *Bolt) Changes(_ context.Context, after uint64, limit int) ([]Change, uint64, error) {
	var out []Change
	var rev uint64
	err := b.db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bMeta)
		rev = getU64(meta, kRevision)
		if after > rev || (after < getU64(meta, kCompacted)) {
			return ErrCompacted
		}
		cur := tx.Bucket(bChanges).Cursor()
		for k, v := cur.Seek(u64(after + 1)); k != nil && (limit <= 0 || len(out) < limit); k, v = cur.Next() {
			c, err := decodeChange(v)
			if err != nil {
				return err
			}
			out = append(out, c)
		}
		return nil
	})
	return out, rev, err
}

func (b *Bolt) RegisterNode(_ context.Context, name string, r apitypes.Registration, now time.Time) (apitypes.Node, error) {
	var n apitypes.Node
	err := b.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bNodes)
		if v := bk.Get([]byte(name)); v != nil {
			var err error
			if n, err = decodeNode(v); err != nil {
				return err
			}
		}
		n.Name, n.Registration, n.RegisteredAt = name, r, now.UTC()
		data, err := encodeNode(n)
		if err != nil {
			return err
		}
		return bk.Put([]byte(name), data)
	})
	return n, err
}

// Heartbeat uses bbolt's batching: many agents' heartbeats share one fsync.
func (b *Bolt) Heartbeat(_ context.Context, name string, h apitypes.Heartbeat, now time.Time) (apitypes.Node, error) {
	var n apitypes.Node
	err := b.db.Batch(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bNodes)
		v := bk.Get([]byte(name))
		if v == nil {
			return ErrNotFound
		}
		var err error
		if n, err = decodeNode(v); err != nil {
			return err
		}
		n.Heartbeat, n.LastHeartbeat = h, now.UTC()
		data, err := encodeNode(n)
		if err != nil {
			return err
		}
		return bk.Put([]byte(name), data)
	})
	return n, err
}

func (b *Bolt) GetNode(_ context.Context, name string) (apitypes.Node, error) {
	var n apitypes.Node
	err := b.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bNodes).Get([]byte(name))
		if v == nil {
			return ErrNotFound
		}
		var err error
		n, err = decodeNode(v)
		return err
	})
	return n, err
}

func (b *Bolt) ListNodes(_ context.Context) ([]apitypes.Node, error) {
	var out []apitypes.Node
	err := b.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bNodes).ForEach(func(_, v []byte) error {
			n, err := decodeNode(v)
			if err != nil {
				return err
			}
			out = append(out, n)
			return nil
		})
	})
	return out, err
}

func (b *Bolt) DeleteNode(_ context.Context, name string) error {
	return b.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bNodes)
		if bk.Get([]byte(name)) == nil {
			return ErrNotFound
		}
		return bk.Delete([]byte(name))
	})
}

// revocation is a deny-list entry of the bolt store.
type revocation struct {
	Until time.Time `json:"until"`
	By    string    `json:"by,omitempty"`
}

// RevokeToken records the revocation in the file, dropping entries whose
// tokens have expired. The bolt store has one process (the file is
// locked), so its next Verify sees it.
func (b *Bolt) RevokeToken(_ context.Context, id string, until time.Time, by string) error {
	now := time.Now()
	return b.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bRevoked)
		if bk.Get([]byte(id)) != nil {
			return nil // already revoked
		}
		cur := bk.Cursor()
		for k, v := cur.First(); k != nil; k, v = cur.Next() {
			var r revocation
			if json.Unmarshal(v, &r) == nil && r.Until.Before(now) {
				if err := cur.Delete(); err != nil {
					return err
				}
			}
		}
		data, err := json.Marshal(revocation{Until: until.UTC(), By: by})
		if err != nil {
			return err
		}
		return bk.Put([]byte(id), data)
	})
}

// TokenRevoked reads the entry (a read transaction: microseconds).
func (b *Bolt) TokenRevoked(id string) (bool, error) {
	var found bool
	err := b.db.View(func(tx *bolt.Tx) error {
		found = tx.Bucket(bRevoked).Get([]byte(id)) != nil
		return nil
	})
	return found, err
}

var _ Store = (*Bolt)(nil)
