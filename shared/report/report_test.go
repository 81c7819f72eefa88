package report

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseValid(t *testing.T) {
	t.Parallel()
	cases := []struct {
		body   string
		xid    uint64
		hasXID bool
		seqs   []int64
	}{
		{`{"v":1,"xid":"7305","sequences":[1201,1202,1207]}`, 7305, true, []int64{1201, 1202, 1207}},
		{`{"v":1,"sequences":[3,1,2,3,1]}`, 0, false, []int64{1, 2, 3}}, // duplicates dropped, sorted
		{`{"v":1,"xid":null,"sequences":[9]}`, 0, false, []int64{9}},
		{` {"sequences":[ 5 ,
	6 ],"v":1,"xid":"3"} `, 3, true, []int64{5, 6}},
		{`{"v":1,"xid":"9223372036854775807","sequences":[9223372036854775807]}`, 1<<63 - 1, true, []int64{1<<63 - 1}},
	}
	for _, c := range cases {
		t.Run(c.body, func(t *testing.T) {
			r, err := Parse([]byte(c.body), 10)
			if err != nil {
				t.Errorf("Parse(%s): %v", c.body, err)
				return
			}
			if r.XID != c.xid || r.HasXID != c.hasXID || !slices.Equal(r.Sequences, c.seqs) {
				t.Errorf("Parse(%s) = %+v, want xid %d/%v seqs %v", c.body, r, c.xid, c.hasXID, c.seqs)
			}
		})
	}
}

// The limit counts distinct sequences: duplicates are ignored (§5).
func TestParseLimitCountsDistinct(t *testing.T) {
	t.Parallel()
	r, err := Parse([]byte(`{"v":1,"sequences":[3,1,2,3,1,2]}`), 3)
	if err != nil || !slices.Equal(r.Sequences, []int64{1, 2, 3}) {
		t.Fatalf("6 entries, 3 distinct, limit 3: %+v, %v", r, err)
	}
}

func TestParseInvalid(t *testing.T) {
	t.Parallel()
	cases := []struct{ body, reason string }{
		{``, "malformed JSON"},
		{`not json`, "malformed JSON"},
		{`{"v":1,"sequences":[1]} {}`, "trailing data"},
		{`[1,2]`, "malformed JSON"},
		{`{"v":1,"sequences":[1],"extra":true}`, `unknown key "extra"`},
		{`{"v":1,"sequences":[1]}}`, "trailing data"},
		{`null`, "not a JSON object"},
		{`{"v":"1","sequences":[1]}`, "v must be a whole number"},
		{`{"v":1,"sequences":{"0":1}}`, "sequences must be an array"},
		{`{"sequences":[1]}`, "missing version"},
		{`{"v":2,"sequences":[1]}`, "unsupported version v=2"},
		{`{"v":1}`, "missing sequences"},
		{`{"v":1,"sequences":null}`, "missing sequences"},
		{`{"v":1,"sequences":[]}`, "empty sequences"},
		{`{"v":1,"sequences":[1,2,3,4]}`, "exceed the limit of 3"},
		{`{"v":1,"sequences":[1,2,3,1,4]}`, "4 sequences exceed the limit of 3"},
		{`{"v":1,"sequences":[0]}`, "not positive"},
		{`{"v":1,"sequences":[-5]}`, "not positive"},
		{`{"v":1,"sequences":[1.5]}`, "not a whole number"},
		{`{"v":1,"sequences":[1e3]}`, "not a whole number"},
		{`{"v":1,"sequences":[99999999999999999999]}`, "bigint range"},
		{`{"v":1,"sequences":["1"]}`, "not a whole number"},
		{`{"v":1,"sequences":[null]}`, "not a whole number"},
		{`{"v":1,"xid":7305,"sequences":[1]}`, "decimal string"},
		{`{"v":1,"xid":"","sequences":[1]}`, "not a decimal xid8"},
		{`{"v":1,"xid":"-1","sequences":[1]}`, "not a decimal xid8"},
		{`{"v":1,"xid":"12a","sequences":[1]}`, "not a decimal xid8"},
		{`{"v":1,"xid":"+12","sequences":[1]}`, "not a decimal xid8"},
		{`{"v":1,"xid":"9223372036854775808","sequences":[1]}`, "out of xid8 range"},
		{`{"v":1,"xid":"2","sequences":[1]}`, "special transaction id"},
	}
	for _, c := range cases {
		t.Run(c.body, func(t *testing.T) {
			_, err := Parse([]byte(c.body), 3)
			var inv *InvalidError
			if !errors.As(err, &inv) {
				t.Errorf("Parse(%q) error = %v, want *InvalidError", c.body, err)
				return
			}
			if !strings.Contains(inv.Reason, c.reason) {
				t.Errorf("Parse(%q) reason %q, want it to contain %q", c.body, inv.Reason, c.reason)
			}
		})
	}
}

// The documented format is exact: a key in another case is another key,
// which encoding/json alone would take for the documented one.
func TestParseRefusesKeysInAnotherCase(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ body, key string }{
		{`{"V":1,"XID":"7","Sequences":[4]}`, `"V"`},
		{`{"v":1,"XID":"7","sequences":[4]}`, `"XID"`},
		{`{"v":1,"xid":"7","Sequences":[4]}`, `"Sequences"`},
	} {
		t.Run(c.body, func(t *testing.T) {
			_, err := Parse([]byte(c.body), 10)
			var inv *InvalidError
			if !errors.As(err, &inv) {
				t.Fatalf("Parse accepted it (%v), want *InvalidError", err)
			}
			if !strings.Contains(inv.Reason, c.key) || !strings.Contains(inv.Reason, "exact and lower-case") {
				t.Errorf("reason %q, want it to name %s and say keys are exact", inv.Reason, c.key)
			}
		})
	}
}

// A key given twice is refused: encoding/json would keep the last, and a
// parser that keeps the first would read another report from the same body.
func TestParseRefusesDuplicatedKeys(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ body, key string }{
		{`{"v":1,"sequences":[1],"sequences":[2]}`, `"sequences"`},
		{`{"v":1,"xid":"7","xid":"8","sequences":[1]}`, `"xid"`},
		{`{"v":1,"xid":null,"xid":"8","sequences":[1]}`, `"xid"`},
		{`{"v":1,"v":1,"sequences":[1]}`, `"v"`},
	} {
		t.Run(c.body, func(t *testing.T) {
			_, err := Parse([]byte(c.body), 10)
			var inv *InvalidError
			if !errors.As(err, &inv) {
				t.Fatalf("Parse accepted it (%v), want *InvalidError", err)
			}
			if !strings.Contains(inv.Reason, c.key+" appears twice") {
				t.Errorf("reason %q, want it to say %s appears twice", inv.Reason, c.key)
			}
		})
	}
}

func TestEncodeChunksAndRoundTrips(t *testing.T) {
	t.Parallel()
	seqs := []int64{1, 2, 3, 4, 5, 6, 7}
	bodies, err := Encode(Report{XID: 42, HasXID: true, Sequences: seqs}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(bodies) != 3 {
		t.Fatalf("%d bodies, want 3 chunks of at most 3", len(bodies))
	}
	var got []int64
	for _, b := range bodies {
		r, err := Parse(b, 3)
		if err != nil {
			t.Fatalf("Parse(Encode) %s: %v", b, err)
		}
		if !r.HasXID || r.XID != 42 {
			t.Fatalf("xid lost in %s", b)
		}
		got = append(got, r.Sequences...)
	}
	if !slices.Equal(got, seqs) {
		t.Fatalf("round trip %v, want %v", got, seqs)
	}
	noXID, _ := Encode(Report{Sequences: []int64{9}}, 0)
	var w map[string]any
	if err := json.Unmarshal(noXID[0], &w); err != nil {
		t.Fatal(err)
	}
	if _, ok := w["xid"]; ok {
		t.Fatalf("a report without xid encodes one: %s", noXID[0])
	}
	if _, err := Encode(Report{}, 3); err == nil {
		t.Fatal("Encode of an empty report succeeded")
	}
}
