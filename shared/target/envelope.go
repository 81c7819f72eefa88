package target

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Event is what the envelope carries of one outbox event.
type Event struct {
	Sequence   int64
	Topic      string
	RecordedAt time.Time
	// Headers and Payload are JSON as stored (jsonb). Nil headers (SQL
	// NULL) become {}, so a consumer can always look a header up.
	Headers json.RawMessage
	Payload json.RawMessage
}

// RecordedAtLayout is the envelope's time: RFC 3339 in UTC with exactly six
// fractional digits, PostgreSQL's timestamptz precision, so every event's
// recorded_at has one spelling and sorts as text.
const RecordedAtLayout = "2006-01-02T15:04:05.000000Z07:00"

// Envelope is the one message body of an event on every target (the
// EventBridge Detail, the SNS and SQS message body, the Kinesis record):
//
//	{"sequence":42,"topic":"orders.created","recorded_at":"2026-12-01T19:56:00.123456Z","headers":{},"payload":{…}}
//
// sequence is a JSON number (an int64: exact in any consumer that parses
// integers as such, and below 2^53 for any outbox that will ever exist);
// headers and payload are copied verbatim, not re-encoded, so a payload
// arrives byte for byte as written. Invalid JSON in either is an error
// naming the sequence: a body that is not JSON would be refused (EventBridge)
// or break every consumer.
func Envelope(e Event) ([]byte, error) {
	headers := e.Headers
	if len(bytes.TrimSpace(headers)) == 0 {
		headers = json.RawMessage("{}")
	}
	payload := e.Payload
	if len(bytes.TrimSpace(payload)) == 0 {
		payload = json.RawMessage("null")
	}
	if !json.Valid(headers) {
		return nil, fmt.Errorf("envelope of sequence %d: headers are not valid JSON", e.Sequence)
	}
	if !json.Valid(payload) {
		return nil, fmt.Errorf("envelope of sequence %d: payload is not valid JSON", e.Sequence)
	}
	topic, err := json.Marshal(e.Topic)
	if err != nil {
		return nil, fmt.Errorf("envelope of sequence %d: topic: %w", e.Sequence, err)
	}
	b := make([]byte, 0, 96+len(topic)+len(headers)+len(payload))
	b = append(b, `{"sequence":`...)
	b = strconv.AppendInt(b, e.Sequence, 10)
	b = append(b, `,"topic":`...)
	b = append(b, topic...)
	b = append(b, `,"recorded_at":"`...)
	b = e.RecordedAt.UTC().AppendFormat(b, RecordedAtLayout)
	b = append(b, `","headers":`...)
	b = append(b, headers...)
	b = append(b, `,"payload":`...)
	b = append(b, payload...)
	b = append(b, '}')
	return b, nil
}

// DedupID is an event's deduplication id on the targets that have one
// (SQS FIFO, SNS FIFO): <schema>:<sequence>, the same for every resend of
// the event, and distinct between two outboxes relaying to one target.
func DedupID(schema string, sequence int64) string {
	return schema + ":" + strconv.FormatInt(sequence, 10)
}
