package compensate

import (
	"strings"
	"testing"

	"github.com/outboxkeeper/outboxkeeper/shared/report"
)

func TestDecideByTheWriterStatusAndTheHead(t *testing.T) {
	t.Parallel()
	check := Check{Head: 100, XMax: 500, Status: map[uint64]string{
		10: StatusCommitted, 11: StatusAborted, 12: StatusInProgress, 13: StatusTooOld, 600: StatusFuture, 501: StatusInProgress,
	}}
	rep := func(xid uint64, seqs ...int64) report.Report {
		return report.Report{XID: xid, HasXID: xid != 0, Sequences: seqs}
	}
	cases := []struct {
		name     string
		r        report.Report
		receives int
		want     Outcome
		reason   string
	}{
		{"committed fills", rep(10, 1, 2), 1, Filled, ""},
		{"aborted fills", rep(11, 100), 1, Filled, ""},
		{"too old fills", rep(13, 5), 1, Filled, ""},
		{"no xid is owner-trusted", rep(0, 7), 1, Filled, ""},
		{"in progress defers", rep(12, 5), 1, Deferred, "in progress"},
		{"in progress defers below the cap", rep(12, 5), 2, Deferred, "in progress"},
		{"in progress at the cap drops", rep(12, 5), 3, Dropped, "fill function"},
		{"above head is invalid", rep(11, 5, 101), 1, Invalid, "above the allocation head 100"},
		{"above head without xid is invalid", rep(0, 101), 1, Invalid, "above the allocation head"},
		{"future xid is invalid", rep(600, 5), 1, Invalid, "in the future"},
		{"running xid above xmax defers", rep(501, 5), 1, Deferred, "in progress"},
		{"unknown status never fills", rep(14, 5), 1, Deferred, "unknown status"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, reason := Decide(c.r, c.receives, check, 3)
			if got != c.want {
				t.Errorf("Decide = %v (%q), want %v", got, reason, c.want)
			}
			if !strings.Contains(reason, c.reason) {
				t.Errorf("Decide's reason %q, want it to contain %q", reason, c.reason)
			}
			if (got == Filled) != (reason == "") {
				t.Fatalf("a reason is given exactly when the outcome is not Filled: %v %q", got, reason)
			}
		})
	}
}
