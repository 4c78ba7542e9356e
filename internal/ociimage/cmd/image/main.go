// SPDX-License-Identifier: Apache-2.0

// Command image builds swiftlane's container image as an OCI layout tarball
// and pushes it to a registry (package ociimage; `make image`, `make
// image-push`):
//
//	go run ./internal/ociimage/cmd/image build -out build/swiftlane-image.tar \
//	    -name ghcr.io/swiftlane/swiftlane:0.1.0 -binary linux/amd64=build/image/linux-amd64/swiftlane
//	go run ./internal/ociimage/cmd/image push -in build/swiftlane-image.tar registry.example/swiftlane:v0.1.0
//
// build prints the image's digest. Timestamps come from -source-date-epoch
// (default $SOURCE_DATE_EPOCH, else 0), so rebuilding the same binaries
// gives the same digest.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/swiftlane/swiftlane/internal/ociimage"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: image build|push [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "build":
		err = build(os.Args[2:])
	case "push":
		err = push(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: use build or push", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

type binaries []ociimage.Binary

func (b *binaries) String() string { return fmt.Sprint(*b) }
func (b *binaries) Set(v string) error {
	plat, path, ok := strings.Cut(v, "=")
	if !ok || path == "" {
		return errors.New("want OS/ARCH=PATH, e.g. linux/amd64=build/swiftlane")
	}
	p, err := v1.ParsePlatform(plat)
	if err != nil {
		return err
	}
	*b = append(*b, ociimage.Binary{Platform: *p, Path: path})
	return nil
}

func build(args []string) error {
	fs := flag.NewFlagSet("build", flag.ExitOnError)
	var bins binaries
	fs.Var(&bins, "binary", "OS/ARCH=PATH of a static swiftlane binary (repeat for a multi-platform index)")
	out := fs.String("out", "build/swiftlane-image.tar", "OCI layout tarball to write")
	ref := fs.String("name", "ghcr.io/swiftlane/swiftlane:latest", "image name recorded for `ctr images import` (and pushed by default)")
	version := fs.String("version", "", "org.opencontainers.image.version label")
	epoch := fs.Int64("source-date-epoch", envEpoch(), "every timestamp in the image, seconds since 1970")
	entryArgs := fs.String("args", "", "space-separated arguments after the binary in the entrypoint (e.g. \"lab pause\" for the lab cluster's sandbox image)")
	// Another program's image, as the conformance suite's agnhost.
	path := fs.String("path", ociimage.BinaryPath, "where the binary goes in the image (the entrypoint)")
	cmd := fs.String("cmd", "", "space-separated default command after the entrypoint")
	root := fs.Bool("root", false, "run as root instead of the nonroot user")
	title := fs.String("title", "swiftlane", "org.opencontainers.image.title label")
	rootfs := fs.String("rootfs", "", "directory whose tree is a layer under the binary's (tools the image's users run)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	created := time.Unix(*epoch, 0).UTC()
	a, err := ociimage.Build(ociimage.Options{Binaries: bins, Created: created, Version: *version, Args: strings.Fields(*entryArgs),
		Path: *path, Cmd: strings.Fields(*cmd), Root: *root, Title: *title, Rootfs: *rootfs})
	if err != nil {
		return err
	}
	if err := ociimage.WriteLayout(*out, a, *ref, created); err != nil {
		return err
	}
	d, err := a.Digest()
	if err != nil {
		return err
	}
	full, _ := ociimage.ImageName(*ref)
	fmt.Printf("%s %s@%s\n", *out, full, d)
	return nil
}

func envEpoch() int64 {
	n, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

func push(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("push", flag.ExitOnError)
	in := fs.String("in", "build/swiftlane-image.tar", "OCI layout tarball written by build")
	if err := fs.Parse(args); err != nil {
		return err
	}
	l, err := ociimage.OpenLayout(*in)
	if err != nil {
		return err
	}
	defer l.Close()
	ref := l.Name
	switch fs.NArg() {
	case 0:
	case 1:
		ref = fs.Arg(0)
	default:
		return errors.New("push takes one image name")
	}
	if ref == "" {
		return fmt.Errorf("%s names no image: give one (push REGISTRY/REPO:TAG)", *in)
	}
	if err := ociimage.Push(ctx, l.Artifact, ref); err != nil {
		return err
	}
	d, err := l.Artifact.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s@%s\n", ref, d)
	return nil
}
