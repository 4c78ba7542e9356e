// SPDX-License-Identifier: Apache-2.0

package store

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// The bolt file's records: JSON documents whose shape is the file format,
// which a newer binary must keep reading. They are this package's own types,
// not the API's, and convert to and from them field for field (a Go
// conversion, which ignores tags): a field added to the API's types stops
// these conversions compiling until the record says how to keep it, and a
// JSON name changed in the API does not change the file.

// strategyRecord is a strategy in the strategies bucket and in put changes.
type strategyRecord struct {
	strategy.Strategy
	Namespaces      []string          `json:"namespaces,omitempty"`
	NodeSelector    map[string]string `json:"node_selector,omitempty"`
	Revision        uint64            `json:"revision,omitempty"`
	CreatedRevision uint64            `json:"created_revision,omitempty"`
	Owner           string            `json:"owner,omitempty"`
}

// changeRecord is an entry of the changes bucket, keyed by its revision.
type changeRecord struct {
	Revision uint64          `json:"revision"`
	Type     ChangeType      `json:"type"`
	Name     string          `json:"name"`
	Strategy *strategyRecord `json:"strategy,omitempty"`
}

// nodeRecord is a node in the nodes bucket. Its registration and last
// status stay in the form the agent sent: every heartbeat rewrites them, so
// they carry no history to keep readable. Healthy is the server's to compute
// when it answers: the store never sets it, so files hold false.
type nodeRecord struct {
	Name string `json:"name"`
	apitypes.Registration
	apitypes.Heartbeat
	RegisteredAt  time.Time `json:"registered_at"`
	LastHeartbeat time.Time `json:"last_heartbeat"`
	Healthy       bool      `json:"healthy"`
}

func encodeStrategy(s apitypes.Strategy) ([]byte, error) {
	return json.Marshal(strategyRecord(s))
}

func decodeStrategy(data []byte) (apitypes.Strategy, error) {
	var r strategyRecord
	err := json.Unmarshal(data, &r)
	return apitypes.Strategy(r), err
}

// sameStrategy reports whether two strategies make the same record.
func sameStrategy(a, b apitypes.Strategy) bool {
	x, _ := encodeStrategy(a)
	y, _ := encodeStrategy(b)
	return bytes.Equal(x, y)
}

func encodeChange(c Change) ([]byte, error) {
	r := changeRecord{Revision: c.Revision, Type: c.Type, Name: c.Name}
	if c.Strategy != nil {
		s := strategyRecord(*c.Strategy)
		r.Strategy = &s
	}
	return json.Marshal(r)
}

func decodeChange(data []byte) (Change, error) {
	var r changeRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return Change{}, err
	}
	c := Change{Revision: r.Revision, Type: r.Type, Name: r.Name}
	if r.Strategy != nil {
		s := apitypes.Strategy(*r.Strategy)
		c.Strategy = &s
	}
	return c, nil
}

func encodeNode(n apitypes.Node) ([]byte, error) {
	return json.Marshal(nodeRecord(n))
}

func decodeNode(data []byte) (apitypes.Node, error) {
	var r nodeRecord
	err := json.Unmarshal(data, &r)
	return apitypes.Node(r), err
}
