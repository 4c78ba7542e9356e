// SPDX-License-Identifier: Apache-2.0

// Package ociimage builds swiftlane's container image with
// go-containerregistry, without a Docker engine or a base image: one layer
// holds the static binary and the few files a static Go program reads, so the
// build needs no registry and the same inputs give the same digest.
//
// Reproducible: every timestamp is Options.Created, file modes and owners are
// fixed, the layer's entries are in a fixed order, and the input binary's own
// mode, owner and mtime are ignored (only its bytes count).
package ociimage

import (
	"archive/tar"
	"bytes"
	"cmp"
	"compress/gzip"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// BinaryPath is where the binary lives in the image; it is the entrypoint,
	// and the chart passes only arguments (agent ..., api ...).
	BinaryPath = "/usr/local/bin/swiftlane"
	// UID and GID of the image's default user, "nonroot". The chart runs the
	// API as this user (runAsUser 65532) and overrides it with uid 0 for the
	// agent, which needs capabilities a non-root exec would drop.
	UID = 65532
	GID = 65532
	// User is the config's User: numeric, so the kubelet can verify
	// runAsNonRoot without reading /etc/passwd.
	User = "65532:65532"
)

// Binary is the static swiftlane binary built for one platform.
type Binary struct {
	Platform v1.Platform // OS "linux", Architecture "amd64" or "arm64"
	Path     string
}

// Options say what to build.
type Options struct {
	Binaries []Binary // one image per platform; several make an index
	// Created is every timestamp in the image (config, history, layer
	// entries): SOURCE_DATE_EPOCH, so it depends on the source, not the clock.
	Created time.Time
	// Version goes in the org.opencontainers.image.version label.
	Version string
	// Args follow the binary in the entrypoint; empty for the product image
	// (the chart passes the subcommand). The lab cluster's pod sandbox
	// image is the same binary with "lab", "pause".
	Args []string

	// The lab's test images (the conformance suite's agnhost) are other
	// programs laid out as their upstream images are: these say how.

	// Path is where the binary goes and what the entrypoint runs:
	// BinaryPath when empty.
	Path string
	// Cmd is the default command after the entrypoint (none when empty).
	Cmd []string
	// Root makes root the image's user instead of nonroot.
	Root bool
	// Title is the org.opencontainers.image.title label: "swiftlane" when empty.
	Title string
	// Rootfs is a directory laid under the binary's layer as a layer of its
	// own: the tools a test image's commands run (a shell, curl, nc).
	// Modes and symbolic links are kept; owners are root, times Created.
	Rootfs string
}

// Artifact is a built or read image: a v1.Image for one platform, or a
// v1.ImageIndex for several. Both can be written to a layout and pushed.
type Artifact interface {
	Digest() (v1.Hash, error)
	MediaType() (types.MediaType, error)
	Size() (int64, error)
	RawManifest() ([]byte, error)
}

// Build returns the image for o's binaries.
func Build(o Options) (Artifact, error) {
	if len(o.Binaries) == 0 {
		return nil, fmt.Errorf("no binary given")
	}
	seen := map[string]bool{}
	var imgs []mutate.IndexAddendum
	for _, b := range o.Binaries {
		p := b.Platform.String()
		if seen[p] {
			return nil, fmt.Errorf("two binaries for %s", p)
		}
		seen[p] = true
		img, err := buildOne(b, o)
		if err != nil {
			return nil, err
		}
		if len(o.Binaries) == 1 {
			return img, nil
		}
		plat := b.Platform
		imgs = append(imgs, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &plat}})
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	return mutate.AppendManifests(idx, imgs...), nil
}

func buildOne(b Binary, o Options) (v1.Image, error) {
	bin, err := readStatic(b)
	if err != nil {
		return nil, err
	}
	created := o.Created.UTC().Truncate(time.Second)
	path, user, title := cmp.Or(o.Path, BinaryPath), User, cmp.Or(o.Title, "swiftlane")
	if o.Root {
		user = "0:0"
	}
	if !strings.HasPrefix(path, "/") || strings.HasSuffix(path, "/") {
		return nil, fmt.Errorf("binary path %q: want an absolute file path like /agnhost", path)
	}
	data, err := layerTar(bin, path, created)
	if err != nil {
		return nil, err
	}
	layer, err := newLayer(data)
	if err != nil {
		return nil, err
	}
	var base []mutate.Addendum
	if o.Rootfs != "" {
		data, err := dirTar(o.Rootfs, created)
		if err != nil {
			return nil, err
		}
		l, err := newLayer(data)
		if err != nil {
			return nil, err
		}
		base = append(base, mutate.Addendum{Layer: l, MediaType: types.OCILayer,
			History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "swiftlane ociimage: the tools of " + filepath.Base(o.Rootfs)}})
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cfg := &v1.ConfigFile{
		Created:      v1.Time{Time: created},
		OS:           b.Platform.OS,
		Architecture: b.Platform.Architecture,
		Variant:      b.Platform.Variant,
		Config: v1.Config{
			Entrypoint: append([]string{path}, o.Args...),
			Cmd:        o.Cmd,
			User:       user,
			WorkingDir: "/",
			Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
			Labels: map[string]string{
				"org.opencontainers.image.title":    title,
				"org.opencontainers.image.source":   "https://github.com/swiftlane/swiftlane",
				"org.opencontainers.image.version":  o.Version,
				"org.opencontainers.image.licenses": "Apache-2.0",
			},
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, err
	}
	return mutate.Append(img, append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: created}, CreatedBy: "swiftlane ociimage: " + path + " and /etc/passwd, /etc/group"},
	})...)
}

// newLayer makes a layer of an uncompressed tar. Best compression: built
// once, pulled by every node. Compressed once (cached) for both the digest
// and the blob.
func newLayer(data []byte) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestCompression), tarball.WithCompressedCaching)
}

// ELF machine of each architecture we build for (both little-endian, like
// the embedded BPF objects).
var machines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// readStatic returns the binary's bytes after checking that it is a
// static ELF executable for its platform: a dynamically linked one (built
// with cgo) would not start in an image without a libc.
func readStatic(b Binary) ([]byte, error) {
	if b.Platform.OS != "linux" {
		return nil, fmt.Errorf("%s: only linux images are built", b.Platform)
	}
	want, ok := machines[b.Platform.Architecture]
	if !ok {
		return nil, fmt.Errorf("%s: architecture not supported: use amd64 or arm64", b.Platform)
	}
	data, err := os.ReadFile(b.Path)
	if err != nil {
		return nil, err
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: not an ELF executable: %w", b.Path, err)
	}
	defer f.Close()
	if f.Machine != want {
		return nil, fmt.Errorf("%s is built for %s, not %s (set GOARCH)", b.Path, f.Machine, b.Platform)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return nil, fmt.Errorf("%s is dynamically linked: build it with CGO_ENABLED=0", b.Path)
		}
	}
	return data, nil
}

// Files of the layer besides the binary. passwd/group name the two users
// the chart runs as, for tools that print user names; no shell, no CA
// bundle (clients pass --ca-file; in-cluster clients use the service
// account's CA).
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group  = "root:x:0:\nnonroot:x:65532:\n"
)

// entry is one file of a layer.
type entry struct {
	name     string
	mode     int64
	uid, gid int
	data     []byte // nil for a directory or a symbolic link
	link     string // a symbolic link's target
}

// layerTar returns the binary's layer as an uncompressed tar: parents
// before children, every header fully fixed.
func layerTar(bin []byte, path string, mtime time.Time) ([]byte, error) {
	entries := []entry{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: UID, gid: GID},
		{name: "root/", mode: 0o700},
		{name: "tmp/", mode: 0o1777},
		{name: "usr/", mode: 0o755},
		{name: "usr/local/", mode: 0o755},
		{name: "usr/local/bin/", mode: 0o755},
	}
	// The binary's directories, where they are not among those above.
	name := strings.TrimPrefix(path, "/")
	for i := range len(name) {
		if dir := name[:i+1]; name[i] == '/' && !slices.ContainsFunc(entries, func(e entry) bool { return e.name == dir }) {
			entries = append(entries, entry{name: dir, mode: 0o755})
		}
	}
	return writeTar(append(entries, entry{name: name, mode: 0o755, data: bin}), mtime)
}

// dirTar returns the tree under dir as an uncompressed tar, in lexical
// order (parents first), owned by root, with the files' own modes.
func dirTar(dir string, mtime time.Time) ([]byte, error) {
	var entries []entry
	err := walkTree(dir, func(p, rel string, d fs.DirEntry) error {
		info, err := d.Info()
		if err != nil {
			return err
		}
		e := entry{name: rel, mode: int64(info.Mode().Perm())}
		switch {
		case d.IsDir():
			e.name += "/"
		case d.Type()&fs.ModeSymlink != 0:
			e.mode = 0o777
			if e.link, err = os.Readlink(p); err != nil {
				return err
			}
		case d.Type().IsRegular():
			if e.data, err = os.ReadFile(p); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: only directories, files and symbolic links go in an image layer", p)
		}
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("rootfs: %w", err)
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("rootfs %s is empty", dir)
	}
	return writeTar(entries, mtime)
}

// walkTree calls fn for each path under dir but dir, in lexical order,
// with the path relative to dir, slash-separated.
func walkTree(dir string, fn func(p, rel string, d fs.DirEntry) error) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		return fn(p, filepath.ToSlash(rel), d)
	})
}

func writeTar(entries []entry, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.gid,
			ModTime: mtime, Typeflag: tar.TypeDir, Format: tar.FormatUSTAR,
		}
		switch {
		case e.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.link
		case e.data != nil:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ImageName is the fully qualified name containerd stores an image under
// (docker.io for Docker Hub, tag "latest" when none is given), so a name
// imported with `ctr images import` is the one the kubelet asks for.
func ImageName(ref string) (string, error) {
	t, err := name.NewTag(ref)
	if err != nil {
		return "", fmt.Errorf("image name %q: %w", ref, err)
	}
	reg := t.RegistryStr()
	if reg == name.DefaultRegistry {
		reg = "docker.io"
	}
	return reg + "/" + t.RepositoryStr() + ":" + t.TagStr(), nil
}
