// SPDX-License-Identifier: Apache-2.0

package ociimage

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations of the image's entry in index.json. containerd's importer
// names the image after the first verbatim; the OCI one carries the tag,
// as the image-layout spec suggests.
const (
	AnnotationContainerdName = "io.containerd.image.name"
	AnnotationRefName        = "org.opencontainers.image.ref.name"
)

// WriteLayout writes a as an OCI image layout tarball at dst (replaced
// atomically), its index.json entry naming it ref, so that
// `ctr -n k8s.io images import dst` stores it under ImageName(ref). Every
// tar entry has mtime, mode 0644/0755 and owner 0, in a fixed order, so
// the tarball's bytes depend only on a, ref and mtime.
func WriteLayout(dst string, a Artifact, ref string, mtime time.Time) error {
	full, err := ImageName(ref)
	if err != nil {
		return err
	}
	t, _ := name.NewTag(full)
	desc := v1.Descriptor{Annotations: map[string]string{
		AnnotationContainerdName: full,
		AnnotationRefName:        t.TagStr(),
	}}
	if img, ok := a.(v1.Image); ok {
		// One platform: say which in the descriptor too, so a platform
		// filter need not open the config.
		cf, err := img.ConfigFile()
		if err != nil {
			return err
		}
		desc.Platform = cf.Platform()
	}
	top := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: a, Descriptor: desc})

	dir, err := os.MkdirTemp(filepath.Dir(dst), ".oci-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if _, err := layout.Write(dir, top); err != nil {
		return fmt.Errorf("OCI layout: %w", err)
	}
	tmp := dst + ".tmp"
	if err := tarDir(dir, tmp, mtime.UTC().Truncate(time.Second)); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, dst)
}

// tarDir writes the tree under dir to the tar file dst, sorted by path.
func tarDir(dir, dst string, mtime time.Time) error {
	var names []string
	err := walkTree(dir, func(p, rel string, d fs.DirEntry) error {
		if d.IsDir() {
			rel += "/"
		} else if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		names = append(names, rel)
		return nil
	})
	if err != nil {
		return err
	}
	slices.Sort(names) // "blobs/" sorts before "blobs/sha256/": parents first
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, n := range names {
		h := &tar.Header{Name: n, ModTime: mtime, Format: tar.FormatUSTAR}
		if strings.HasSuffix(n, "/") {
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			continue
		}
		if err := copyFile(tw, h, filepath.Join(dir, filepath.FromSlash(n))); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

func copyFile(tw *tar.Writer, h *tar.Header, p string) error {
	src, err := os.Open(p)
	if err != nil {
		return err
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, fi.Size()
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err = io.Copy(tw, src)
	return err
}

// Layout is an OCI layout tarball opened for reading (unpacked into a
// temporary directory, which Close removes).
type Layout struct {
	Artifact Artifact // the image or index the tarball names
	Name     string   // its io.containerd.image.name annotation
	dir      string
}

// Close removes the unpacked copy.
func (l *Layout) Close() error { return os.RemoveAll(l.dir) }

// OpenLayout reads an OCI layout tarball written by WriteLayout: the first
// entry of its index.json.
func OpenLayout(src string) (*Layout, error) {
	dir, err := os.MkdirTemp("", "swiftlane-oci-")
	if err != nil {
		return nil, err
	}
	l := &Layout{dir: dir}
	if err := untar(src, dir); err != nil {
		l.Close()
		return nil, err
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("%s: %w", src, err)
	}
	if err := l.open(p, src); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

func (l *Layout) open(p layout.Path, src string) error {
	idx, err := p.ImageIndex()
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	if len(im.Manifests) == 0 {
		return fmt.Errorf("%s: index.json lists no image", src)
	}
	d := im.Manifests[0]
	l.Name = d.Annotations[AnnotationContainerdName]
	switch d.MediaType {
	case types.OCIManifestSchema1, types.DockerManifestSchema2:
		l.Artifact, err = idx.Image(d.Digest)
	case types.OCIImageIndex, types.DockerManifestList:
		l.Artifact, err = idx.ImageIndex(d.Digest)
	default:
		err = fmt.Errorf("index.json: media type %q is neither an image nor an index", d.MediaType)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	return nil
}

// untar unpacks the layout tarball src into dir: regular files and
// directories only, every name kept inside dir.
func untar(src, dir string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
		n := path.Clean(h.Name)
		if !fs.ValidPath(n) {
			return fmt.Errorf("%s: entry %q leaves the layout", src, h.Name)
		}
		p := filepath.Join(dir, filepath.FromSlash(n))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			err = writeFile(p, tr)
		default:
			err = fmt.Errorf("%s: entry %q is not a file or directory", src, h.Name)
		}
		if err != nil {
			return err
		}
	}
}

func writeFile(p string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Push uploads a's blobs, then its manifest, tagged ref, with the
// credentials of the Docker config file (docker login, crane auth login) or
// the credential helper it names. a must be the v1.Image or v1.ImageIndex
// itself (Layout.Artifact): for anything else only the manifest is sent.
func Push(ctx context.Context, a Artifact, ref string, opts ...remote.Option) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return fmt.Errorf("image name %q: %w", ref, err)
	}
	opts = append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	if err := remote.Push(r, a, opts...); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}
