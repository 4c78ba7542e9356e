// SPDX-License-Identifier: Apache-2.0

package kubeagent

import (
	"strings"
	"testing"
)

// TestNewResolverDriver: a cgroup driver the kubelet does not have is
// refused by its flag's name before the layout is read.
func TestNewResolverDriver(t *testing.T) {
	if _, err := NewResolver("/", "cgroupv2"); err == nil || !strings.Contains(err.Error(), "--kubelet-cgroup-driver") {
		t.Errorf("NewResolver(driver cgroupv2) = %v, want an error naming --kubelet-cgroup-driver", err)
	}
}
