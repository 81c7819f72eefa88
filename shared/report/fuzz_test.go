package report

import (
	"errors"
	"slices"
	"testing"
)

// FuzzParse: whatever arrives on the queue, Parse never panics, every
// rejection is an *InvalidError with a reason (that reason becomes the DLQ
// message's `error` attribute), and every acceptance satisfies the contract
// the handler relies on. `go test` runs the seed corpus; CI runs
//
//	go test ./shared/report -run '^$' -fuzz '^FuzzParse$' -fuzztime 30s
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		`{"v":1,"xid":"7305","sequences":[1201,1202,1207]}`,
		`{"v":1,"sequences":[1]}`,
		`{"v":1,"xid":null,"sequences":[3,3,2]}`,
		`{"v":2,"sequences":[1]}`,
		`{"v":1,"sequences":[]}`,
		`{"v":1,"sequences":[0,-1]}`,
		`{"v":1,"xid":"18446744073709551615","sequences":[1]}`,
		`{"v":1,"xid":"1","sequences":[1]}`,
		`{"v":1,"sequences":[1.0,1e2,99999999999999999999]}`,
		`{"v":1,"sequences":[1]}{}`,
		`{"v":1,"sequences":[1],"x":1}`,
		`{"v":1,"xid":7,"sequences":[1]}`,
		`{"V":1,"XID":"7","Sequences":[4]}`,
		`{"v":1,"sequences":[1],"sequences":[2]}`,
		`{"v":1,"xid":null,"xid":"8","sequences":[1]}`,
		`{"\u0076":1,"sequences":[1]}`,
		`{"v":1,"sequences":[1]}}`,
		`{"v":1,"sequences":[1,2,3,4,5,6,7,8,9,10,11]}`,
		``, `null`, `[]`, `{`, "\xff\xfe",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		const max = 10
		r, err := Parse(body, max)
		if err != nil {
			var inv *InvalidError
			if !errors.As(err, &inv) || inv.Reason == "" {
				t.Fatalf("Parse(%q): rejection without a reason: %v", body, err)
			}
			return
		}
		if len(r.Sequences) == 0 || len(r.Sequences) > max {
			t.Fatalf("Parse(%q) accepted %d sequences", body, len(r.Sequences))
		}
		for i, s := range r.Sequences {
			if s <= 0 || (i > 0 && s <= r.Sequences[i-1]) {
				t.Fatalf("Parse(%q) sequences not positive, distinct and ascending: %v", body, r.Sequences)
			}
		}
		if r.HasXID && (r.XID < 3 || r.XID > 1<<63-1) {
			t.Fatalf("Parse(%q) accepted xid %d", body, r.XID)
		}
		if !r.HasXID && r.XID != 0 {
			t.Fatalf("Parse(%q) has an xid value without HasXID", body)
		}
		// What Parse accepts, Encode writes back to something Parse reads
		// the same way: the sender and the receiver agree.
		bodies, err := Encode(r, max)
		if err != nil || len(bodies) != 1 {
			t.Fatalf("Encode(Parse(%q)) = %d bodies, %v", body, len(bodies), err)
		}
		again, err := Parse(bodies[0], max)
		if err != nil || again.XID != r.XID || again.HasXID != r.HasXID || !slices.Equal(again.Sequences, r.Sequences) {
			t.Fatalf("round trip of %q: %+v, %v", body, again, err)
		}
	})
}
