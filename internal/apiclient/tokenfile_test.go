// SPDX-License-Identifier: Apache-2.0

package apiclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// bearerServer answers 200 to every request and remembers the last
// Authorization header.
type bearerServer struct {
	mu   sync.Mutex
	last string
}

func (b *bearerServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.last = r.Header.Get("Authorization")
	b.mu.Unlock()
	w.Write([]byte("{}"))
}

// sent makes one request with c and returns the token the server got.
func (b *bearerServer) sent(t *testing.T, c *Client) string {
	t.Helper()
	if err := c.Do(context.Background(), http.MethodGet, "/api/v1/nodes", nil, nil); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}

func tokenClient(t *testing.T, path string) (*bearerServer, *Client) {
	b := &bearerServer{}
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	return b, NewClient(srv.URL, "", nil).WithTokenSource(TokenFile(path))
}

// TestTokenFileSecretVolume rotates a token the way the kubelet updates a
// Secret volume: the file is a symlink through ..data to a timestamped
// directory, and an update writes a new directory and renames a new
// ..data symlink over the old one. Both files have the same size and
// mtime; the next request carries the new token.
func TestTokenFileSecretVolume(t *testing.T) {
	vol := t.TempDir()
	old := time.Now().Add(-time.Hour) // long settled: no re-read for freshness
	writeGen := func(gen, tok string) {
		t.Helper()
		d := filepath.Join(vol, gen)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(d, "token")
		if err := os.WriteFile(f, []byte(tok), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(f, old, old); err != nil {
			t.Fatal(err)
		}
	}
	writeGen("..2026_01_01_00_00_00.1", "token-one")
	if err := os.Symlink("..2026_01_01_00_00_00.1", filepath.Join(vol, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/token", filepath.Join(vol, "token")); err != nil {
		t.Fatal(err)
	}
	b, c := tokenClient(t, filepath.Join(vol, "token"))
	if got := b.sent(t, c); got != "Bearer token-one" {
		t.Fatalf("first request sent %q", got)
	}

	writeGen("..2026_01_01_00_05_00.2", "token-two")
	if err := os.Symlink("..2026_01_01_00_05_00.2", filepath.Join(vol, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(vol, "..data_tmp"), filepath.Join(vol, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(vol, "..2026_01_01_00_00_00.1")); err != nil {
		t.Fatal(err)
	}
	if got := b.sent(t, c); got != "Bearer token-two" {
		t.Fatalf("after the Secret update the request sent %q", got)
	}
}

// TestTokenFileSameSizeRewrite: a token rewritten in place with the same
// length within the file system's timestamp granularity (same size, mtime
// and inode as the read before) is still picked up.
func TestTokenFileSameSizeRewrite(t *testing.T) {
	f := filepath.Join(t.TempDir(), "agent.token")
	if err := os.WriteFile(f, []byte("token-one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(f)
	if err != nil {
		t.Fatal(err)
	}
	b, c := tokenClient(t, f)
	if got := b.sent(t, c); got != "Bearer token-one" {
		t.Fatalf("first request sent %q", got)
	}
	if err := os.WriteFile(f, []byte("token-two\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(f, fi.ModTime(), fi.ModTime()); err != nil { // one timestamp tick
		t.Fatal(err)
	}
	if got := b.sent(t, c); got != "Bearer token-two" {
		t.Fatalf("after the rewrite the request sent %q", got)
	}
}

// TestTokenFileKeepsLastToken: while the file is missing or empty (an
// operator between rm and write), requests carry the last token read.
func TestTokenFileKeepsLastToken(t *testing.T) {
	f := filepath.Join(t.TempDir(), "agent.token")
	if err := os.WriteFile(f, []byte("token-one"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, c := tokenClient(t, f)
	b.sent(t, c)
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := b.sent(t, c); got != "Bearer token-one" {
		t.Fatalf("empty file: sent %q", got)
	}
	if err := os.Remove(f); err != nil {
		t.Fatal(err)
	}
	if got := b.sent(t, c); got != "Bearer token-one" {
		t.Fatalf("no file: sent %q", got)
	}
	if err := os.WriteFile(f, []byte("token-two"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := b.sent(t, c); got != "Bearer token-two" {
		t.Fatalf("new file: sent %q", got)
	}
}
