// SPDX-License-Identifier: Apache-2.0

package schedext

import "testing"

// A scheduler whose load failed halfway closes its Links as they are: the
// zero value, or partly opened, must release without error.
func TestLinksCloseWhatIsThere(t *testing.T) {
	var l Links
	if err := l.Detach(); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if err := l.CloseEvents(); err != nil {
		t.Fatalf("CloseEvents: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
