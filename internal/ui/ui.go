// SPDX-License-Identifier: Apache-2.0

// Package ui is the control plane's web UI: static HTML, JS and CSS embedded
// in the binary (no build step), talking to the API with the user's token.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var files embed.FS

// Handler serves the UI.
func Handler() http.Handler {
	sub, _ := fs.Sub(files, "static")
	fsrv := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Frame-Options", "DENY")
		fsrv.ServeHTTP(w, r)
	})
}
