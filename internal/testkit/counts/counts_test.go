package counts

import (
	"fmt"
	"testing"
)

// recorder is a testing.TB that keeps what Errorf says.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func TestWantFailsOncePerCounterNamingIt(t *testing.T) {
	for _, c := range []struct {
		name string
		what string
		cs   []Count
		want []string
	}{
		{"all as wanted", "x", []Count{Of("Filled", int64(1), 1), Of("Cycles", 2, 2)}, nil},
		{"one off", "after rollback", []Count{Of("Filled", int64(0), 1), Of("Cycles", 1, 1)}, []string{"after rollback: Filled = 0, want 1"}},
		{"each off on its own", "", []Count{Of("Filled", int64(0), 1), Of("Cycles", 3, 1, "one proof")},
			[]string{"Filled = 0, want 1", "Cycles = 3, want 1 (one proof)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &recorder{TB: t}
			Want(r, c.what, c.cs...)
			if fmt.Sprint(r.errs) != fmt.Sprint(c.want) {
				t.Errorf("Want said %q, want %q", r.errs, c.want)
			}
		})
	}
}
