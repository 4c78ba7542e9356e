// SPDX-License-Identifier: Apache-2.0

package store

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/swiftlane/swiftlane/internal/apitypes"
)

// The bolt store's audit history is the audit bucket: one record per entry,
// keyed by the bucket's sequence, so key order is the order of recording
// and an entry's ID is its key in hex (16 digits: hex order is key order).
// An append drops the oldest keys beyond the bound in its own transaction,
// so the file never holds more than the bound.

// auditRecord is an entry of the audit bucket; it converts to and from the
// API's type field for field (see records.go). The ID is the key.
type auditRecord struct {
	ID        string               `json:"-"`
	Time      time.Time            `json:"time"`
	Subject   string               `json:"subject"`
	Role      string               `json:"role"`
	Node      string               `json:"node,omitempty"`
	TokenID   string               `json:"token_id,omitempty"`
	Operation string               `json:"operation"`
	Object    apitypes.AuditObject `json:"object"`
	Outcome   string               `json:"outcome"`
	Status    int                  `json:"status,omitempty"`
	Error     string               `json:"error,omitempty"`
	Detail    string               `json:"detail,omitempty"`
	Revision  uint64               `json:"revision,omitempty"`
	Server    string               `json:"server,omitempty"`
	Source    string               `json:"source,omitempty"`
}

// AppendAudit stores e under the next sequence number and drops the
// entries beyond the bound, oldest first.
func (b *Bolt) AppendAudit(_ context.Context, e apitypes.AuditEntry) (apitypes.AuditEntry, error) {
	err := b.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bAudit)
		seq, err := bk.NextSequence()
		if err != nil {
			return err
		}
		key := u64(seq)
		e.ID = hex.EncodeToString(key)
		data, err := json.Marshal(auditRecord(e))
		if err != nil {
			return err
		}
		if err := bk.Put(key, data); err != nil {
			return err
		}
		// Keys are consecutive (only the oldest are ever deleted), so the
		// first key says how many there are.
		first, _ := bk.Cursor().First()
		return dropOldestAudit(bk, int(seq-binary.BigEndian.Uint64(first)+1)-int(b.auditSize))
	})
	return e, err
}

// dropOldestAudit deletes the n oldest entries (none if n <= 0).
func dropOldestAudit(bk *bolt.Bucket, n int) error {
	cur := bk.Cursor()
	// Re-seek after each delete: a cursor's Next after Delete can skip a key.
	for k, _ := cur.First(); k != nil && n > 0; k, _ = cur.First() {
		if err := cur.Delete(); err != nil {
			return err
		}
		n--
	}
	return nil
}

// ListAudit walks the bucket from the newest key down, or from just below
// Before when it is an ID of this store (16 hex digits).
func (b *Bolt) ListAudit(_ context.Context, q apitypes.AuditQuery) ([]apitypes.AuditEntry, bool, error) {
	var out []apitypes.AuditEntry
	var more bool
	err := b.db.View(func(tx *bolt.Tx) error {
		cur := tx.Bucket(bAudit).Cursor()
		k, v := cur.Last()
		if key, err := hex.DecodeString(q.Before); err == nil && len(key) == 8 {
			if k, v = cur.Seek(key); k == nil {
				k, v = cur.Last()
			} else {
				k, v = cur.Prev()
			}
		}
		var err error
		out, more, err = q.Page(func() (apitypes.AuditEntry, bool, error) {
			if k == nil {
				return apitypes.AuditEntry{}, false, nil
			}
			var r auditRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return apitypes.AuditEntry{}, false, fmt.Errorf("audit entry %x: %w", k, err)
			}
			e := apitypes.AuditEntry(r)
			e.ID = hex.EncodeToString(k)
			k, v = cur.Prev()
			return e, true, nil
		})
		return err
	})
	return out, more, err
}
