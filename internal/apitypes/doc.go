// SPDX-License-Identifier: Apache-2.0

// Package apitypes holds the JSON bodies of the control plane's REST API and
// the rules that validate them: what the server (internal/api) decodes and
// answers, what its client, the node agent and `swiftlane ctl` send and
// read, and what /openapi.json is generated from. strategy.go and node.go
// are the resources, bodies.go the envelopes each endpoint sends and takes,
// error.go the error body. The stores keep strategies and nodes in their
// own record form (internal/store).
package apitypes
