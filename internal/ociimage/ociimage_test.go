// SPDX-License-Identifier: Apache-2.0

package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"gopkg.in/yaml.v3"
)

var (
	amd64   = v1.Platform{OS: "linux", Architecture: "amd64"}
	arm64   = v1.Platform{OS: "linux", Architecture: "arm64"}
	epoch   = time.Unix(1_700_000_000, 0).UTC()
	refName = "ghcr.io/swiftlane/swiftlane:0.1.0"
)

// staticBinary builds a tiny static Go program for arch: a real binary
// of the right shape, in a second instead of the minute the real one takes.
func staticBinary(t *testing.T, arch string) string {
	t.Helper()
	dir := t.TempDir()
	src := "package main\n\nfunc main() { println(\"swiftlane image test\") }\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module imagetest\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "swiftlane")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=-buildvcs=false")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

func build(t *testing.T, o Options) (Artifact, string) {
	t.Helper()
	a, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "swiftlane-image.tar")
	if err := WriteLayout(dst, a, refName, o.Created); err != nil {
		t.Fatal(err)
	}
	return a, dst
}

func digest(t *testing.T, a Artifact) v1.Hash {
	t.Helper()
	d, err := a.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestReproducible: the same binary bytes and epoch give the same digest
// and the same tarball, whatever the input file's path, mode and mtime.
func TestReproducible(t *testing.T) {
	bin := staticBinary(t, "amd64")
	a1, tar1 := build(t, Options{Binaries: []Binary{{amd64, bin}}, Created: epoch, Version: "v0.1.0"})

	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.WriteFile(other, data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(other, time.Unix(1e9, 0), time.Unix(1e9, 0)); err != nil {
		t.Fatal(err)
	}
	a2, tar2 := build(t, Options{Binaries: []Binary{{amd64, other}}, Created: epoch, Version: "v0.1.0"})

	if d1, d2 := digest(t, a1), digest(t, a2); d1 != d2 {
		t.Fatalf("two builds, two digests: %s, %s", d1, d2)
	}
	b1, _ := os.ReadFile(tar1)
	b2, _ := os.ReadFile(tar2)
	if !bytes.Equal(b1, b2) {
		t.Fatal("two builds wrote different layout tarballs")
	}
	// The epoch is an input: another one must show.
	a3, _ := build(t, Options{Binaries: []Binary{{amd64, bin}}, Created: epoch.Add(time.Second), Version: "v0.1.0"})
	if digest(t, a3) == digest(t, a1) {
		t.Fatal("another SOURCE_DATE_EPOCH gave the same digest")
	}
}

// TestImageContents reads the tarball back as containerd would and checks
// what the chart relies on: the name, the entrypoint, the non-root numeric
// user, the platform, and the layer's files.
func TestImageContents(t *testing.T) {
	bin := staticBinary(t, "amd64")
	want, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	built, dst := build(t, Options{Binaries: []Binary{{amd64, bin}}, Created: epoch, Version: "v0.1.0"})
	l, err := OpenLayout(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Name != refName {
		t.Fatalf("index.json names %q, want %q", l.Name, refName)
	}
	if digest(t, l.Artifact) != digest(t, built) {
		t.Fatal("the tarball holds another image than the one built")
	}
	img, ok := l.Artifact.(v1.Image)
	if !ok {
		t.Fatalf("one platform: want an image, got %T", l.Artifact)
	}
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Fatalf("manifest media type %s", mt)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{BinaryPath}) || len(cf.Config.Cmd) != 0 {
		t.Fatalf("entrypoint %q cmd %q, want [%s] and none", cf.Config.Entrypoint, cf.Config.Cmd, BinaryPath)
	}
	if cf.Config.User != "65532:65532" {
		t.Fatalf("user %q", cf.Config.User)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" || !cf.Created.Time.Equal(epoch) {
		t.Fatalf("os %s arch %s created %s", cf.OS, cf.Architecture, cf.Created.Time)
	}
	if v := cf.Config.Labels["org.opencontainers.image.version"]; v != "v0.1.0" {
		t.Fatalf("version label %q", v)
	}

	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]*tar.Header{}
	var content = map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = h
		if !h.ModTime.Equal(epoch) {
			t.Errorf("%s: mtime %s, want the epoch", h.Name, h.ModTime)
		}
		if content[h.Name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
	exe := strings.TrimPrefix(BinaryPath, "/")
	if h := files[exe]; h == nil || h.Mode != 0o755 || h.Uid != 0 || !bytes.Equal(content[exe], want) {
		t.Fatalf("%s: %+v, or not the input binary", exe, h)
	}
	if !strings.Contains(string(content["etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Fatalf("etc/passwd: %q", content["etc/passwd"])
	}
	if h := files["tmp/"]; h == nil || h.Mode != 0o1777 {
		t.Fatalf("tmp/: %+v", h)
	}
}

// TestChartAgrees: the chart's default image is the name `make image`
// gives (mk/image.mk: IMAGE_REPO and the chart's appVersion), the LB
// example runs it too, and the API Deployment's non-root uid is the
// image's user.
func TestChartAgrees(t *testing.T) {
	read := func(p string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("..", "..", p))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var chart struct {
		AppVersion string `yaml:"appVersion"`
	}
	var values struct {
		Image struct{ Repository, Tag, Digest string }
	}
	if err := yaml.Unmarshal(read("deploy/helm/swiftlane/Chart.yaml"), &chart); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(read("deploy/helm/swiftlane/values.yaml"), &values); err != nil {
		t.Fatal(err)
	}
	mk := regexp.MustCompile(`(?m)^IMAGE_REPO \?= (\S+)$`).FindSubmatch(read("mk/image.mk"))
	if mk == nil {
		t.Fatal("mk/image.mk: no IMAGE_REPO ?= line")
	}
	if string(mk[1]) != values.Image.Repository || values.Image.Tag != "" || values.Image.Digest != "" {
		t.Fatalf("values.yaml image %+v, make image builds %s:<appVersion>", values.Image, mk[1])
	}
	def := values.Image.Repository + ":" + chart.AppVersion
	if !strings.Contains(string(read("deploy/lb/swiftlane-lb.yaml")), "image: "+def+"\n") {
		t.Errorf("deploy/lb/swiftlane-lb.yaml does not run %s", def)
	}
	api := string(read("deploy/helm/swiftlane/templates/api-deployment.yaml"))
	for _, want := range []string{"runAsNonRoot: true", "runAsUser: 65532", "runAsGroup: 65532"} {
		if !strings.Contains(api, want) {
			t.Errorf("api-deployment.yaml has no %q (image user %s)", want, User)
		}
	}
}

// TestMultiPlatform: two binaries make an index with one image each.
func TestMultiPlatform(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the standard library for arm64 once (a few seconds)")
	}
	a, dst := build(t, Options{Binaries: []Binary{{amd64, staticBinary(t, "amd64")}, {arm64, staticBinary(t, "arm64")}}, Created: epoch})
	l, err := OpenLayout(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if digest(t, l.Artifact) != digest(t, a) {
		t.Fatal("the tarball holds another index than the one built")
	}
	idx, ok := l.Artifact.(v1.ImageIndex)
	if !ok {
		t.Fatalf("two platforms: want an index, got %T", l.Artifact)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var archs []string
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if d.Platform == nil || d.Platform.Architecture != cf.Architecture {
			t.Fatalf("descriptor platform %v, config %s", d.Platform, cf.Architecture)
		}
		archs = append(archs, cf.Architecture)
	}
	if !slices.Equal(archs, []string{"amd64", "arm64"}) {
		t.Fatalf("architectures %v", archs)
	}
}

// TestRefusesUnrunnableBinaries: a binary for another architecture, or one
// that needs a dynamic loader the image does not have, is refused.
func TestRefusesUnrunnableBinaries(t *testing.T) {
	bin := staticBinary(t, "amd64")
	if _, err := Build(Options{Binaries: []Binary{{arm64, bin}}, Created: epoch}); err == nil || !strings.Contains(err.Error(), "GOARCH") {
		t.Fatalf("amd64 binary as arm64: %v", err)
	}
	dyn := "/bin/true" // dynamically linked on Debian
	if _, err := os.Stat(dyn); err != nil {
		t.Skip("no /bin/true")
	}
	if _, err := Build(Options{Binaries: []Binary{{amd64, dyn}}, Created: epoch}); err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Fatalf("dynamic binary: %v", err)
	}
}

func TestImageName(t *testing.T) {
	for in, want := range map[string]string{
		"ghcr.io/swiftlane/swiftlane:0.1.0": "ghcr.io/swiftlane/swiftlane:0.1.0",
		"registry.example:5000/sl":          "registry.example:5000/sl:latest",
		"swiftlane:dev":                     "docker.io/library/swiftlane:dev",
		"me/swiftlane:v1":                   "docker.io/me/swiftlane:v1",
	} {
		if got, err := ImageName(in); err != nil || got != want {
			t.Errorf("ImageName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestPush pushes the tarball's image to a registry (go-containerregistry's
// in-memory one, over HTTP on loopback) and pulls it back by its tag.
func TestPush(t *testing.T) {
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // no credentials from the host
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)

	_, dst := build(t, Options{Binaries: []Binary{{amd64, staticBinary(t, "amd64")}}, Created: epoch})
	l, err := OpenLayout(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ref := u.Host + "/swiftlane/swiftlane:test"
	if err := Push(context.Background(), l.Artifact, ref); err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(r)
	if err != nil {
		t.Fatal(err)
	}
	if d := digest(t, img); d != digest(t, l.Artifact) {
		t.Fatalf("registry has %s, pushed %s", d, digest(t, l.Artifact))
	}
	cf, err := img.ConfigFile()
	if err != nil || cf.Config.User != User {
		t.Fatalf("pulled config: %+v, %v", cf, err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("pulled layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.Copy(io.Discard, rc); err != nil {
		t.Fatalf("pulling the layer: %v", err)
	}
}

// TestOtherProgram: the lab's test images (agnhost) are another binary at
// its upstream path, run as root with a default command, over a layer of
// tools taken from a directory with its symbolic links and modes.
func TestOtherProgram(t *testing.T) {
	bin := staticBinary(t, "amd64")
	rootfs := t.TempDir()
	if err := os.MkdirAll(filepath.Join(rootfs, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "bin", "busybox"), []byte("a shell"), 0o751); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", "sh")); err != nil {
		t.Fatal(err)
	}
	a, _ := build(t, Options{Binaries: []Binary{{amd64, bin}}, Created: epoch, Path: "/opt/e2e/agnhost",
		Cmd: []string{"pause"}, Root: true, Title: "agnhost", Rootfs: rootfs})
	img := a.(v1.Image)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{"/opt/e2e/agnhost"}) || !slices.Equal(cf.Config.Cmd, []string{"pause"}) ||
		cf.Config.User != "0:0" || cf.Config.Labels["org.opencontainers.image.title"] != "agnhost" {
		t.Fatalf("config %+v", cf.Config)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 2 {
		t.Fatalf("layers %d, %v; want the tools' and the binary's", len(layers), err)
	}
	tools, binary := layerFiles(t, layers[0]), layerFiles(t, layers[1])
	if h := tools["bin/busybox"]; h == nil || h.Typeflag != tar.TypeReg || h.Mode != 0o751 || h.Uid != 0 || !h.ModTime.Equal(epoch) {
		t.Fatalf("bin/busybox: %+v", h)
	}
	if h := tools["bin/sh"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "busybox" {
		t.Fatalf("bin/sh: %+v, want a link to busybox", h)
	}
	for _, dir := range []string{"opt/", "opt/e2e/"} {
		if h := binary[dir]; h == nil || h.Typeflag != tar.TypeDir {
			t.Fatalf("%s: %+v, want the binary's directory", dir, h)
		}
	}
	if h := binary["opt/e2e/agnhost"]; h == nil || h.Mode != 0o755 {
		t.Fatalf("opt/e2e/agnhost: %+v", h)
	}

	for _, bad := range []string{"agnhost", "/opt/"} {
		if _, err := Build(Options{Binaries: []Binary{{amd64, bin}}, Path: bad}); err == nil || !strings.Contains(err.Error(), "absolute file path") {
			t.Errorf("path %q: %v, want it refused", bad, err)
		}
	}
	if _, err := Build(Options{Binaries: []Binary{{amd64, bin}}, Rootfs: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("an empty rootfs: %v, want it refused", err)
	}
}

// layerFiles is the layer's headers by name.
func layerFiles(t *testing.T, l v1.Layer) map[string]*tar.Header {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = h
	}
}
