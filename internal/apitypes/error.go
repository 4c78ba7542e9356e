// SPDX-License-Identifier: Apache-2.0

package apitypes

import (
	"fmt"
	"net/http"
	"strings"
)

// Error is the body of every error response, and the error apiclient.Client
// returns for one (Status from the response: it is not in the body).
type Error struct {
	Status int    `json:"-"`
	Err    string `json:"error"`
	// Field is the request field at fault ("" when it is not about one).
	Field string `json:"field"`
	// Hint says how to fix the request.
	Hint string `json:"hint"`
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Status != 0 {
		fmt.Fprintf(&b, "%d %s: ", e.Status, http.StatusText(e.Status))
	}
	b.WriteString(e.Err)
	if e.Hint != "" {
		b.WriteString(" (" + e.Hint + ")")
	}
	return b.String()
}
