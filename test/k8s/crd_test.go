// SPDX-License-Identifier: Apache-2.0
//go:build k8stest

package k8s

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// The CRDs' schema and CEL rules, as a real kube-apiserver enforces them on
// `kubectl apply`: each bad object is refused with the message that names
// the field and the fix, each good one is stored (with class defaulted).
func TestCRDValidation(t *testing.T) {
	k := cluster(t)
	k.applyCRDs(t)
	ns := k.namespace(t, "crd-validation")

	strategy := func(name, spec string) string {
		return fmt.Sprintf("apiVersion: swiftlane.io/v1alpha1\nkind: SchedulingStrategy\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n%s\n", name, ns, indent(spec))
	}
	for _, tc := range []struct {
		name, spec string
		want       []string // all in kubectl's error
	}{
		{"no matcher", "class: high", []string{"set at least one matcher: podSelector, commandRegex, pid or cgroupPath"}},
		{"bad class", "podSelector: {}\nclass: urgent", []string{"spec.class", `Unsupported value: "urgent"`, `"critical"`}},
		{"slice 10s", "podSelector: {}\nslice: 10s", []string{"spec.slice", "slice must be between 50us and 1s"}},
		{"slice 1us", "podSelector: {}\nslice: 1us", []string{"spec.slice", "slice must be between 50us and 1s"}},
		{"slice 49us", "podSelector: {}\nslice: 49us", []string{"slice must be between 50us and 1s"}},
		{"slice not a duration", "podSelector: {}\nslice: fast", []string{"spec.slice", "must be of type duration"}},
		{"namespaceSelector without podSelector", "commandRegex: upf\nnamespaceSelector: {matchLabels: {tier: ran}}",
			[]string{"namespaceSelector needs podSelector (use podSelector: {} for every pod)"}},
		{"relative cgroupPath", "cgroupPath: kubepods.slice", []string{"spec.cgroupPath", "^/"}},
		{"pid 0", "pid: 0", []string{"spec.pid", "greater than or equal to 1"}},
		{"empty commandRegex", "commandRegex: ''", []string{"spec.commandRegex"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := k.kubectl(t, []byte(strategy("bad", tc.spec)), "apply", "--server-side", "--field-manager=crd-test", "-f", "-")
			if err == nil {
				t.Fatalf("accepted:\n%s\n%s", tc.spec, out)
			}
			t.Logf("refused: %v", err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
		})
	}

	for _, tc := range []struct {
		name, spec, class string
	}{
		{"every pod", "podSelector: {}", "critical"}, // class defaults to critical
		{"regex with slice", "commandRegex: 'nr-gnb|nr-ue'\nclass: high\nslice: 2ms\ninherit: true", "high"},
		{"system namespace reach", "podSelector: {matchLabels: {app: upf}}\nnamespaceSelector: {matchLabels: {tier: core}}", "critical"},
		{"cgroup, shortest slice", "cgroupPath: /batch.slice\nclass: background\nslice: 50us", "background"},
		{"pid on one node, longest slice", "pid: 4242\nnodeSelector: {kubernetes.io/hostname: n1}\nclass: normal\nslice: 1s", "normal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.ReplaceAll(tc.name, " ", "-")
			name = strings.ReplaceAll(name, ",", "")
			if out, err := k.kubectl(t, []byte(strategy(name, tc.spec)), "apply", "--server-side", "--field-manager=crd-test", "-f", "-"); err != nil {
				t.Fatalf("refused: %v\n%s", err, out)
			}
			out, err := k.kubectl(t, nil, "get", "-n", ns, "schedulingstrategy", name, "-o", "json")
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				Spec struct {
					Class string `json:"class"`
				} `json:"spec"`
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatal(err)
			}
			if got.Spec.Class != tc.class {
				t.Errorf("stored class %q, want %q", got.Spec.Class, tc.class)
			}
		})
	}

	// The short names and the category work.
	out, err := k.kubectl(t, nil, "get", "sst", "-n", ns, "-o", "name")
	if err != nil || strings.Count(out, "schedulingstrategy.swiftlane.io/") != 5 {
		t.Errorf("kubectl get sst: %v\n%s", err, out)
	}

	// SchedulingNode status: mode is schedule or observe.
	node := "apiVersion: swiftlane.io/v1alpha1\nkind: SchedulingNode\nmetadata:\n  name: crd-node\n"
	if _, err := k.kubectl(t, []byte(node), "apply", "--server-side", "--field-manager=crd-test", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	setMode := func(mode string) error {
		_, err := k.kubectl(t, nil, "patch", "schedulingnode", "crd-node", "--subresource=status", "--type=merge",
			"-p", `{"status":{"mode":"`+mode+`"}}`)
		return err
	}
	if err := setMode("observe"); err != nil {
		t.Errorf("status mode observe refused: %v", err)
	}
	if err := setMode("fast"); err == nil || !strings.Contains(err.Error(), `Unsupported value: "fast"`) {
		t.Errorf("status mode fast: want it refused as unsupported, got %v", err)
	}
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}
