// Package envelopetest reads a message body back as the documented
// envelope the relay sends (docs/design.md), for the tests that check
// what arrived at a target.
package envelopetest

import (
	"encoding/json"
	"testing"
)

// Envelope is a message body as the relay sends it.
type Envelope struct {
	Sequence   int64           `json:"sequence"`
	Topic      string          `json:"topic"`
	RecordedAt string          `json:"recorded_at"`
	Headers    json.RawMessage `json:"headers"`
	Payload    json.RawMessage `json:"payload"`
}

// Parse reads body as an Envelope; a body that is not one fails the test
// naming it.
func Parse(t testing.TB, body string) Envelope {
	t.Helper()
	var e Envelope
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("body %q is not an envelope: %v", body, err)
	}
	return e
}
