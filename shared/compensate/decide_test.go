package compensate

import (
	"strings"
	"testing"

	"github.com/outboxkeeper/outboxkeeper/shared/report"
)

func TestDecide(t *testing.T) {
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
		want     Verdict
		reason   string
	}{
		{"committed fills", rep(10, 1, 2), 1, Fill, ""},
		{"aborted fills", rep(11, 100), 1, Fill, ""},
		{"too old fills", rep(13, 5), 1, Fill, ""},
		{"no xid is owner-trusted", rep(0, 7), 1, Fill, ""},
		{"in progress defers", rep(12, 5), 1, Defer, "in progress"},
		{"in progress defers below the cap", rep(12, 5), 2, Defer, "in progress"},
		{"in progress at the cap drops", rep(12, 5), 3, Drop, "fill function"},
		{"above head is invalid", rep(11, 5, 101), 1, Invalid, "above the allocation head 100"},
		{"above head without xid is invalid", rep(0, 101), 1, Invalid, "above the allocation head"},
		{"future xid is invalid", rep(600, 5), 1, Invalid, "in the future"},
		{"running xid above xmax defers", rep(501, 5), 1, Defer, "in progress"},
		{"unknown status never fills", rep(14, 5), 1, Defer, "unknown status"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, reason := Decide(c.r, c.receives, check, 3)
			if got != c.want || !strings.Contains(reason, c.reason) {
				t.Fatalf("Decide = %v %q, want %v containing %q", got, reason, c.want, c.reason)
			}
			if (got == Fill) != (reason == "") {
				t.Fatalf("a reason is given exactly when the verdict is not Fill: %v %q", got, reason)
			}
		})
	}
}
