// SPDX-License-Identifier: Apache-2.0

package cmd

import "fmt"

func errNotYet(what string) error {
	return fmt.Errorf("%s: not implemented in this build", what)
}
