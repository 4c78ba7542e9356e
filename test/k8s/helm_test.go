// SPDX-License-Identifier: Apache-2.0
//go:build k8stest

// Running helm on the chart and reading what it renders.

package k8s

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// chartDir is the chart under test, from this package's directory.
var chartDir = filepath.Join("..", "..", "deploy", "helm", "swiftlane")

// tool is the path of a binary lab/k8s.sh built (helm, kubectl, ...).
func tool(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("SWL_K8S_BIN")
	if dir == "" {
		t.Fatal("SWL_K8S_BIN is not set: run SWL_K8S_BIN=$(bash lab/k8s.sh) go test -tags k8stest ./test/k8s/")
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v (bash lab/k8s.sh builds it)", name, err)
	}
	return p
}

// run runs a binary and returns its stdout; the error carries stderr.
func run(t *testing.T, stdin []byte, bin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+helmHome, "HELM_CONFIG_HOME="+helmHome, "HELM_DATA_HOME="+helmHome)
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// helmHome keeps helm's cache and config out of the user's home.
var helmHome string

const (
	testRelease   = "swl"
	testNamespace = "swl-system"
	// kubeVersion is what helm template and lint assume: helm built without
	// its release ldflags assumes 1.20, below the chart's kubeVersion.
	kubeVersion = "1.36.0"
)

// template is helm template of the chart for testRelease in testNamespace.
func template(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return run(t, nil, tool(t, "helm"), append([]string{"template", testRelease, chartDir,
		"--namespace", testNamespace, "--kube-version", kubeVersion}, args...)...)
}

// render runs helm template for testRelease in testNamespace with extra
// arguments (--set ...) and returns the objects.
func render(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := template(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return decodeObjects(t, out)
}

func decodeObjects(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("rendered manifest: %v", err)
		}
		if m == nil {
			continue // an empty document
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// object returns the one rendered object of that kind and name.
func object(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	var have []string
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
		have = append(have, o.GetKind()+"/"+o.GetName())
	}
	t.Fatalf("no %s %s rendered; have %v", kind, name, have)
	return nil
}

// find converts the one rendered object of that kind and name into out.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string, out any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(object(t, objs, kind, name).Object, out); err != nil {
		t.Fatalf("%s %s: %v", kind, name, err)
	}
}
