// SPDX-License-Identifier: Apache-2.0

package schedext

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// On a kernel without sched_ext (this machine, CI) the refusal names the
// cause and the way out.
func TestCheckExplainsMissingSchedExt(t *testing.T) {
	if _, err := os.Stat(SysfsRoot); err == nil {
		t.Skip("this kernel has sched_ext; the VM lab tests cover attaching")
	}
	err := Check()
	var ue *UnsupportedError
	if !errors.As(err, &ue) || !errors.Is(err, ErrNoSchedExt) {
		t.Fatalf("Check() = %v, want ErrNoSchedExt", err)
	}
	if !strings.Contains(err.Error(), "make demo") || !strings.Contains(err.Error(), "CONFIG_SCHED_CLASS_EXT") {
		t.Fatalf("refusal lacks a fix: %v", err)
	}
}
