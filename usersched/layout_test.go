// SPDX-License-Identifier: Apache-2.0

package usersched

import (
	"testing"

	"github.com/cilium/ebpf"

	"github.com/swiftlane/swiftlane/internal/schedext"
)

// The strategy maps, the event ring and the exit record are read and written
// through internal/schedext's Go types of intf.h: they must have the C
// layout in every object of this package too.
func TestSharedStructLayout(t *testing.T) {
	for _, load := range []func() (*ebpf.CollectionSpec, error){loadUsersched, loadUserschedV2, loadUserschedV3} {
		spec, err := load()
		if err != nil {
			t.Fatal(err)
		}
		if err := schedext.CheckLayout(spec); err != nil {
			t.Error(err)
		}
	}
}
