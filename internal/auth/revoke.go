// SPDX-License-Identifier: Apache-2.0

package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// DenyFile is the deny list of revoked token ids in the data directory.
const DenyFile = "revoked.json"

// ErrRevoked is returned by Verify for a token on the deny list.
var ErrRevoked = errors.New("token revoked")

// denyList is the set of revoked token ids, each kept until the token would
// have expired anyway. It lives in a file so the server and `swiftlane token
// revoke` on the same machine share it: Verify re-reads the file when it
// changed, so a revocation takes effect at the next request, no restart.
type denyList struct {
	path string

	mu    sync.Mutex
	ids   map[string]time.Time // id -> the token's expiry
	stamp fileStamp
}

type fileStamp struct {
	mod  time.Time
	size int64
	ino  uint64
}

func stampOf(fi os.FileInfo) fileStamp {
	s := fileStamp{mod: fi.ModTime(), size: fi.Size()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ino = st.Ino
	}
	return s
}

// UseDenyList makes the authority refuse tokens whose id is in the deny
// list at path (created on the first revocation).
func (a *Authority) UseDenyList(path string) error {
	d := &denyList{path: path, ids: map[string]time.Time{}}
	d.mu.Lock()
	err := d.reloadLocked()
	d.mu.Unlock()
	if err != nil {
		return err
	}
	a.deny = d
	return nil
}

// reloadLocked reads the file if it changed since the last read.
func (d *denyList) reloadLocked() error {
	fi, err := os.Stat(d.path)
	if errors.Is(err, fs.ErrNotExist) {
		clear(d.ids)
		d.stamp = fileStamp{}
		return nil
	}
	if err != nil {
		return fmt.Errorf("deny list: %w", err)
	}
	st := stampOf(fi)
	if st == d.stamp {
		return nil
	}
	data, err := os.ReadFile(d.path)
	if err != nil {
		return fmt.Errorf("deny list: %w", err)
	}
	ids := map[string]time.Time{}
	if err := json.Unmarshal(data, &ids); err != nil {
		return fmt.Errorf("deny list %s: %w: fix or delete the file (deleting it un-revokes every token)", d.path, err)
	}
	d.ids, d.stamp = ids, st
	return nil
}

func (d *denyList) revoked(id string) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.reloadLocked(); err != nil {
		return true, err // fail closed: an unreadable list revokes
	}
	_, ok := d.ids[id]
	return ok, nil
}

// add revokes id, under an exclusive lock of the file so concurrent
// revocations (server and CLI) do not lose each other, and drops entries
// whose tokens have expired.
func (d *denyList) add(id string, exp, now time.Time) error {
	lock, err := os.OpenFile(d.path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("deny list: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("deny list: lock: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stamp = fileStamp{} // re-read under the lock
	if err := d.reloadLocked(); err != nil {
		return err
	}
	for k, e := range d.ids {
		if e.Before(now) {
			delete(d.ids, k)
		}
	}
	d.ids[id] = exp.UTC()
	data, err := json.MarshalIndent(d.ids, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(d.path), ".revoked-*")
	if err != nil {
		return fmt.Errorf("deny list: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err == nil {
		err = tmp.Sync()
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("deny list: %w", err)
	}
	if err := os.Rename(tmp.Name(), d.path); err != nil {
		return fmt.Errorf("deny list: %w", err)
	}
	d.stamp = fileStamp{} // the next check reads what was written
	return nil
}

// Revoke puts a token id on the deny list until exp (the token's expiry;
// zero: the longest lifetime a token can have).
func (a *Authority) Revoke(id string, exp time.Time) error {
	if a.deny == nil {
		return errors.New("no deny list: the authority was opened without one")
	}
	if id == "" {
		return errors.New("id: empty: use the token's id (jti), printed by `swiftlane token create`")
	}
	now := a.now()
	if exp.IsZero() {
		exp = now.Add(MaxTTL)
	}
	return a.deny.add(id, exp, now)
}

// TokenID reads a token's id and expiry after checking its signature (but
// not its expiry: revoking an expired token is harmless).
func (a *Authority) TokenID(token string) (string, time.Time, error) {
	var c Claims
	_, err := jwt.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return a.pub, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}), jwt.WithoutClaimsValidation())
	if err != nil {
		return "", time.Time{}, fmt.Errorf("token: %w", err)
	}
	if c.ID == "" {
		return "", time.Time{}, errors.New("token: it has no id (jti)")
	}
	var exp time.Time
	if c.ExpiresAt != nil {
		exp = c.ExpiresAt.Time
	}
	return c.ID, exp, nil
}
