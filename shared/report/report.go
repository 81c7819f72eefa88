// Package report is the wire format of a rollback report (docs/design.md §5): what
// shared/outbox sends to SQS and functions/compensate parses.
//
//	{"v": 1, "xid": "7305", "sequences": [1201, 1202, 1207]}
package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Version is the only body version understood.
const Version = 1

// DefaultMaxSequences is the per-message cap both sides agree on by default
// (COMPENSATE_MAX_SEQUENCES).
const DefaultMaxSequences = 10000

// Report says: the writer with XID abandoned these sequences.
type Report struct {
	// XID is the writer's top-level transaction id (xid8). Zero-valued with
	// HasXID false for an owner-trusted report without one.
	XID    uint64
	HasXID bool
	// Sequences are distinct, positive and ascending.
	Sequences []int64
}

type wire struct {
	V         int     `json:"v"`
	XID       string  `json:"xid,omitempty"`
	Sequences []int64 `json:"sequences"`
}

// Encode splits a report into message bodies of at most max sequences each
// (the receiver refuses larger ones), so a transaction that burned many
// sequences still reports all of them.
func Encode(r Report, max int) ([][]byte, error) {
	if max <= 0 {
		max = DefaultMaxSequences
	}
	if len(r.Sequences) == 0 {
		return nil, errors.New("report: no sequences")
	}
	var out [][]byte
	for chunk := range slices.Chunk(r.Sequences, max) {
		w := wire{V: Version, Sequences: chunk}
		if r.HasXID {
			w.XID = strconv.FormatUint(r.XID, 10)
		}
		b, err := json.Marshal(w)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// InvalidError is bad input: a body that can never succeed, so it goes to
// the DLQ with Reason rather than being retried.
type InvalidError struct{ Reason string }

func (e *InvalidError) Error() string { return "invalid rollback report: " + e.Reason }

func invalid(format string, args ...any) error {
	return &InvalidError{Reason: fmt.Sprintf(format, args...)}
}

// Parse validates one message body. It checks everything that needs no
// database: the allocation head and the xid horizon are checked by the
// handler. Duplicated sequences are dropped; the result is sorted.
func Parse(body []byte, maxSequences int) (Report, error) {
	raw, err := fields(body)
	if err != nil {
		return Report{}, err
	}
	switch {
	case raw.V == nil:
		return Report{}, invalid("missing version field v")
	case *raw.V != Version:
		return Report{}, invalid("unsupported version v=%d (want %d)", *raw.V, Version)
	case raw.Sequences == nil:
		return Report{}, invalid("missing sequences")
	case len(*raw.Sequences) == 0:
		return Report{}, invalid("empty sequences")
	}
	var r Report
	if raw.XID != nil {
		var s string
		if err := json.Unmarshal(*raw.XID, &s); err != nil {
			return Report{}, invalid("xid must be a decimal string, got %s", truncate(string(*raw.XID)))
		}
		x, err := parseXID(s)
		if err != nil {
			return Report{}, err
		}
		r.XID, r.HasXID = x, true
	}
	seen := make(map[int64]struct{}, len(*raw.Sequences))
	for _, n := range *raw.Sequences {
		// A JSON integer is exactly what ParseInt takes: a string, a
		// fraction or an exponent fails here.
		s, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil {
			return Report{}, invalid("sequence %s is not a whole number in bigint range", truncate(string(n)))
		}
		if s <= 0 {
			return Report{}, invalid("sequence %d is not positive", s)
		}
		if _, dup := seen[s]; dup {
			continue
		}
		seen[s] = struct{}{}
		r.Sequences = append(r.Sequences, s)
	}
	// The limit counts distinct sequences (§5: duplicates ignored): it
	// bounds the insert, which sees each sequence once. The body itself is
	// bounded by SQS's message size.
	if len(r.Sequences) > maxSequences {
		return Report{}, invalid("%d sequences exceed the limit of %d", len(r.Sequences), maxSequences)
	}
	slices.Sort(r.Sequences)
	return r, nil
}

// parseXID accepts the decimal text form of xid8. 0 to 2 are special xids
// no writer ever has; a value above int64 is refused because PostgreSQL's
// xid8 input does not take it either.
func parseXID(s string) (uint64, error) {
	if s == "" || len(s) > 20 {
		return 0, invalid("xid %q is not a decimal xid8", truncate(s))
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, invalid("xid %q is not a decimal xid8", truncate(s))
		}
	}
	x, err := strconv.ParseUint(s, 10, 64)
	if err != nil || x > 1<<63-1 {
		return 0, invalid("xid %q is out of xid8 range", truncate(s))
	}
	if x < 3 {
		return 0, invalid("xid %s is a special transaction id, not a writer's", s)
	}
	return x, nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// rawReport is a body's three fields, each nil when absent (or null).
type rawReport struct {
	V   *int
	XID *json.RawMessage
	// RawMessage, not json.Number: json.Number also accepts a quoted
	// number ("12"), which the wire format does not allow.
	Sequences *[]json.RawMessage
}

// keys are the body's fields, exactly as the format spells them.
var keys = []string{"v", "xid", "sequences"}

// fields reads the body's one object key by key. encoding/json alone
// would match a key in any case ("XID") and keep the last of a key given
// twice, so two bodies that read differently to another parser would
// read the same here: the format is exact, and anything else is refused.
func fields(body []byte) (rawReport, error) {
	var raw rawReport
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return raw, invalid("malformed JSON: %v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return raw, invalid("malformed JSON: the body is not a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return raw, invalid("malformed JSON: %v", err)
		}
		key, _ := tok.(string)
		if !slices.Contains(keys, key) {
			for _, k := range keys {
				if strings.EqualFold(k, key) {
					return raw, invalid("key %q: keys are exact and lower-case, want %q", truncate(key), k)
				}
			}
			return raw, invalid("unknown key %q (want v, xid and sequences)", truncate(key))
		}
		if seen[key] {
			return raw, invalid("key %q appears twice", key)
		}
		seen[key] = true
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return raw, invalid("malformed JSON: %v", err)
		}
		if string(value) == "null" {
			continue
		}
		switch key {
		case "v":
			var v int
			if err := json.Unmarshal(value, &v); err != nil {
				return raw, invalid("version v must be a whole number, got %s", truncate(string(value)))
			}
			raw.V = &v
		case "xid":
			raw.XID = &value
		case "sequences":
			var seqs []json.RawMessage
			if err := json.Unmarshal(value, &seqs); err != nil {
				return raw, invalid("sequences must be an array of whole numbers, got %s", truncate(string(value)))
			}
			raw.Sequences = &seqs
		}
	}
	if _, err := dec.Token(); err != nil {
		return raw, invalid("malformed JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return raw, invalid("malformed JSON: trailing data after the object")
	}
	return raw, nil
}
