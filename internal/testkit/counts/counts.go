// Package counts checks the counters of a pass's Result, each on its own
// with its own message, so a test states what it wants of a pass in one
// call instead of an if per counter.
package counts

import "testing"

// Integer is what a counter may be.
type Integer interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 | ~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// Count is one counter of a result and the value a test wants of it,
// with why when the number needs a word.
type Count struct {
	name      string
	got, want int64
	why       string
}

// Of is the counter name, as the result holds it (got), and the value
// the test wants; why, at most one, says why when the number needs it.
func Of[T Integer](name string, got, want T, why ...string) Count {
	c := Count{name: name, got: int64(got), want: int64(want)}
	if len(why) > 0 {
		c.why = why[0]
	}
	return c
}

// Want fails t once for each counter that is not what it wants, as
// "what: Name = got, want want (why)"; what names the point of the test
// (empty for a test's only one).
func Want(t testing.TB, what string, cs ...Count) {
	t.Helper()
	prefix := ""
	if what != "" {
		prefix = what + ": "
	}
	for _, c := range cs {
		switch {
		case c.got == c.want:
		case c.why != "":
			t.Errorf("%s%s = %d, want %d (%s)", prefix, c.name, c.got, c.want, c.why)
		default:
			t.Errorf("%s%s = %d, want %d", prefix, c.name, c.got, c.want)
		}
	}
}
