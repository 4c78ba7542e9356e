// SPDX-License-Identifier: Apache-2.0

package crdconv

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

func TestSpecRoundTrip(t *testing.T) {
	c := strategy.Background
	in := strategy.Strategy{Class: &c, CommandRegex: "nr-gnb", PID: 42, CgroupPath: "/batch.slice", Inherit: true, ExecutionTime: 1_500_000}
	spec, err := Spec(in)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Slice == nil || spec.Slice.Duration != 1500*time.Microsecond || spec.Class != "background" {
		t.Fatalf("spec %+v", spec)
	}
	out, err := Strategy(spec)
	if err != nil {
		t.Fatal(err)
	}
	if *out.Class != c || out.CommandRegex != in.CommandRegex || out.PID != in.PID || out.CgroupPath != in.CgroupPath ||
		out.Inherit != in.Inherit || out.ExecutionTime != in.ExecutionTime {
		t.Fatalf("round trip: %+v, want %+v", out, in)
	}
}

func TestStrategyDefaultsAndRefusals(t *testing.T) {
	s, err := Strategy(v1alpha1.SchedulingStrategySpec{CommandRegex: "x"})
	if err != nil || s.Class == nil || *s.Class != strategy.Critical || s.ExecutionTime != 0 {
		t.Fatalf("no class: %+v %v, want the CRD's default (critical) and the scheduler's slice", s, err)
	}
	if _, err := Strategy(v1alpha1.SchedulingStrategySpec{Class: "urgent"}); err == nil || !strings.HasPrefix(err.Error(), "spec.class: ") {
		t.Fatalf("unknown class: %v", err)
	}
	neg := v1alpha1.SchedulingStrategySpec{Slice: &metav1.Duration{Duration: -time.Millisecond}}
	if _, err := Strategy(neg); err == nil || !strings.Contains(err.Error(), "spec.slice -1ms is negative") {
		t.Fatalf("negative slice: %v", err)
	}
}

func TestSpecCannotHold(t *testing.T) {
	var fe *strategy.FieldError
	if _, err := Spec(strategy.Strategy{PID: math.MaxInt32 + 1}); !errors.As(err, &fe) || fe.Field != "pid" {
		t.Fatalf("huge pid: %v", err)
	}
	if _, err := Spec(strategy.Strategy{ExecutionTime: math.MaxInt64 + 1}); !errors.As(err, &fe) || fe.Field != "execution_time" {
		t.Fatalf("huge slice: %v", err)
	}
}

func TestFieldNames(t *testing.T) {
	for spec, api := range map[string]string{"slice": "execution_time", "commandRegex": "command_regex", "cgroupPath": "cgroup_path", "podSelector": "selectors", "class": "class"} {
		if got := APIField(spec); got != api {
			t.Errorf("APIField(%q) = %q, want %q", spec, got, api)
		}
		if got := SpecField(api); got != spec {
			t.Errorf("SpecField(%q) = %q, want %q", api, got, spec)
		}
	}
	if got := APIField("status"); got != "" {
		t.Errorf("APIField(status) = %q, want none", got)
	}
	if got := SpecField("name"); got != "name" {
		t.Errorf("SpecField(name) = %q, want it unchanged", got)
	}
}

func TestTruncateKeepsUTF8(t *testing.T) {
	if got := Truncate("short", 10); got != "short" {
		t.Fatalf("short string changed: %q", got)
	}
	s := strings.Repeat("é", 10) // 2 bytes each
	for n := 0; n <= len(s); n++ {
		got := Truncate(s, n)
		if len(got) > n || len(got) < n-1 || !utf8.ValidString(got) {
			t.Fatalf("Truncate(%d) = %q (%d bytes)", n, got, len(got))
		}
	}
}
