// SPDX-License-Identifier: Apache-2.0

package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/store"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

func errorf(status int, field, hint, format string, args ...any) *apitypes.Error {
	return &apitypes.Error{Status: status, Err: fmt.Sprintf(format, args...), Field: field, Hint: hint}
}

// fieldError turns a validation error into a 400 naming the field, with the
// message's "use …"/"set …" advice as the hint.
func fieldError(prefix string, err error) *apitypes.Error {
	var fe *strategy.FieldError
	if !errors.As(err, &fe) {
		return errorf(http.StatusBadRequest, strings.TrimSuffix(prefix, "."), "fix the request; /openapi.json describes every field", "%v", err)
	}
	if fe.Field == "" && prefix == "" {
		return errorf(http.StatusBadRequest, "", "send a JSON object; /openapi.json has the schema", "%s", fe.Msg)
	}
	field := prefix + fe.Field
	msg, hint := fe.Msg, ""
	for _, sep := range []string{": use ", ": set ", "; set "} {
		if i := strings.Index(msg, sep); i >= 0 {
			msg, hint = msg[:i], strings.TrimLeft(msg[i+1:], " ")
			break
		}
	}
	if hint == "" {
		hint = fieldHints[fe.Field]
	}
	if hint == "" {
		hint = "fix " + field + "; /openapi.json describes every field"
	}
	return &apitypes.Error{Status: http.StatusBadRequest, Err: field + ": " + msg, Field: field, Hint: hint}
}

// fieldHints are fixes for messages that carry none.
var fieldHints = map[string]string{
	"command_regex": "write an RE2 expression (no backreferences or lookaround), e.g. nr-gnb|nr-ue",
	"pid":           "use a positive process id, or leave pid out",
}

// storeError maps store sentinels to HTTP errors, and a store's own
// validation (the Kubernetes API server's schema and CEL rules) to a 400
// naming the field.
func storeError(what string, err error) *apitypes.Error {
	var fe *strategy.FieldError
	switch {
	case errors.As(err, &fe):
		return fieldError("", err)
	case errors.Is(err, store.ErrNotFound):
		return errorf(http.StatusNotFound, "name", "list them with GET on the collection", "%s not found", what)
	case errors.Is(err, store.ErrExists):
		return errorf(http.StatusConflict, "name", "pick another name, or PUT to replace it", "%s already exists", what)
	case errors.Is(err, store.ErrBusy):
		return errorf(http.StatusServiceUnavailable, "", "retry the request: nothing was written", "%s: %v", what, err)
	}
	return errorf(http.StatusInternalServerError, "", "see the server log", "%s: %v", what, err)
}

// decodeError explains a body the JSON decoder refused.
func decodeError(err error, limit int64) *apitypes.Error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var big *http.MaxBytesError
	msg := err.Error()
	switch {
	case errors.As(err, &big):
		return errorf(http.StatusRequestEntityTooLarge, "", fmt.Sprintf("send at most %d bytes", limit), "request body larger than %d bytes", limit)
	case errors.Is(err, io.EOF):
		return errorf(http.StatusBadRequest, "", "send a JSON object; /openapi.json has the schema", "empty request body")
	case errors.As(err, &syn):
		return errorf(http.StatusBadRequest, "", "send valid JSON", "invalid JSON at byte %d: %v", syn.Offset, err)
	case errors.As(err, &typ):
		f := jsonPath(typ.Field)
		return errorf(http.StatusBadRequest, f, "send a JSON "+typ.Type.Kind().String(), "%s: expected %s, got JSON %s", f, typ.Type.Kind(), typ.Value)
	case strings.HasPrefix(msg, "json: unknown field "):
		f := strings.Trim(strings.TrimPrefix(msg, "json: unknown field "), `"`)
		return errorf(http.StatusBadRequest, f, "remove it; /openapi.json lists the known fields", "unknown field %q", f)
	case strings.Contains(msg, "unknown class"):
		i := strings.Index(msg, "unknown class")
		return errorf(http.StatusBadRequest, "class", "use one of critical, high, normal, background", "class: %s", strings.Split(msg[i:], ": use")[0])
	}
	return errorf(http.StatusBadRequest, "", "send a JSON body matching /openapi.json", "bad request body: %v", err)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	var e *apitypes.Error
	if !errors.As(err, &e) {
		e = errorf(http.StatusInternalServerError, "", "see the server log", "%v", err)
	}
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="swiftlane"`)
	}
	writeJSON(w, e.Status, e)
}

// jsonPath drops the Go names of embedded structs from a decoder's field
// path ("Strategy.pid" -> "pid"): JSON names here are lower-case.
func jsonPath(p string) string {
	parts := strings.Split(p, ".")
	out := parts[:0]
	for _, s := range parts {
		if s != "" && (s[0] < 'A' || s[0] > 'Z') {
			out = append(out, s)
		}
	}
	return strings.Join(out, ".")
}
