package fill

import (
	"log/slog"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// Waiting values of Result.Waiting: why work remains at the end of a pass.
const (
	WaitingGrace  = "grace"  // a stall is inside its grace
	WaitingProof  = "proof"  // a transaction older than the marker still runs
	WaitingLease  = "lease"  // another pass holds the lease
	WaitingBudget = "budget" // work remains but the budget is spent
)

// Result is what one pass did: the Lambda response, the log line (LogValue)
// and the metrics (Metrics), from this one definition.
type Result struct {
	Watermark int64 `json:"watermark"`
	Head      int64 `json:"head"`
	Lag       int64 `json:"lag"`
	// Filled counts placeholders this pass wrote; FilledMin/Max bound them.
	Filled    int64  `json:"filled"`
	FilledMin *int64 `json:"filled_min"`
	FilledMax *int64 `json:"filled_max"`
	// StalledAt is the missing sequence W+1 the pass ended stalled on.
	StalledAt *int64 `json:"stalled_at"`
	// Waiting says why work remains: null, grace, proof, lease or budget.
	Waiting   *string   `json:"waiting"`
	BlockedBy []Blocker `json:"blocked_by"`
	// Historical is true when the current cycle is over gaps present at
	// the first run.
	Historical bool `json:"historical"`
	// Cycle is the cycle the pass ended in, if any.
	Cycle               *CycleView `json:"cycle"`
	StallAgeSeconds     float64    `json:"stall_age_s"`
	ProofBlockedSeconds float64    `json:"proof_blocked_s"`
	// Cycles counts cycles this pass completed: filled up to their marker
	// head.
	Cycles int `json:"cycles"`
	// MarkersTaken counts marker xids this pass assigned (one per cycle;
	// none while a cycle keeps its own).
	MarkersTaken int `json:"markers_taken"`
	// ForeignMarkers counts persisted markers discarded as not this
	// cluster's (§3.7) and taken afresh.
	ForeignMarkers int `json:"foreign_markers"`
	// Started is false until a pass first ran on the table; that pass
	// anchors the watermark at 0.
	Started bool `json:"started"`
	// PassedOver counts sequences of a proven prefix (missing below the
	// lowest present row, more than a page of them) that the pass moved
	// the watermark over without writing placeholders.
	PassedOver int64 `json:"passed_over"`
	// Ticks counts the pass's looks at the head.
	Ticks int `json:"ticks"`
	// LeaseWaitMS is how long a watching pass waited for the lease.
	LeaseWaitMS int64 `json:"lease_wait_ms"`
	// HandedOver says the pass gave its lease to a waiting successor and
	// saw it act as owner (or its budget ended while it waited).
	HandedOver bool `json:"handed_over"`
	// TakenBack counts hand-overs the pass took back because the
	// successor never acted as owner (it died on the way).
	TakenBack int `json:"taken_back"`
	// Retries counts transient database errors the pass recovered from.
	Retries int `json:"retries"`
	// OperatorFilled counts placeholders operators wrote with
	// `outboxkeeper skip-stall` since a pass last reported them (filled_by
	// operator; the watermark passes them like the fill's own).
	OperatorFilled int64 `json:"operator_filled"`
	// FillMS is the time spent writing proven cycles: page reads and
	// inserts after their proofs passed.
	FillMS int64 `json:"fill_ms"`
	// Summary is timed_out (the statement the budget ended, a lock held
	// by another session most often), statements, duration_ms and error.
	pass.Summary

	// headRead is false when the pass ended before reading the head (it
	// waited on the lease, or failed first): Head and Lag then say
	// nothing, and no position metric is emitted for it.
	headRead bool
}

// CycleView is the persisted cycle as reported.
type CycleView struct {
	From        int64     `json:"from"`
	FirstSeenAt time.Time `json:"first_seen_at"`
	Historical  bool      `json:"historical"`
	Marker      *uint64   `json:"marker"`
	MarkerHead  *int64    `json:"marker_head"`
}

func (r *Result) wait(why string) { r.Waiting = &why }

// WaitingFor is Result.Waiting or "".
func (r *Result) WaitingFor() string {
	if r.Waiting == nil {
		return ""
	}
	return *r.Waiting
}

// String is the Result as its JSON response, so a printed Result shows
// waiting, cycle and blockers by value rather than as pointers.
func (r *Result) String() string { return pass.String(r) }

// Level is the log line's level: a blocked proof names the sessions
// holding the horizon, a timed-out statement names what waited, and a
// foreign marker says the state came from another cluster: the
// operator's business.
func (r *Result) Level(err error) slog.Level {
	if err == nil && (r.WaitingFor() == WaitingProof || r.TimedOut != "" || r.ForeignMarkers > 0) {
		return slog.LevelWarn
	}
	return r.Summary.Level(err)
}

// Metrics are the EMF values of the pass. A pass that never read the head
// (it waited on the lease, or failed first) reports no position: a zero
// Lag would hide the real one from the lag alarm, which takes the minute's
// minimum.
func (r *Result) Metrics() []metrics.Metric {
	var ms []metrics.Metric
	if r.headRead {
		ms = append(ms,
			metrics.Metric{Name: "Watermark", Unit: metrics.None, Value: float64(r.Watermark)},
			metrics.Metric{Name: "Head", Unit: metrics.None, Value: float64(r.Head)},
			metrics.Metric{Name: "Lag", Unit: metrics.Count, Value: float64(r.Lag)},
		)
	}
	return append(ms,
		metrics.Metric{Name: "Filled", Unit: metrics.Count, Value: float64(r.Filled)},
		metrics.Metric{Name: "OperatorFilled", Unit: metrics.Count, Value: float64(r.OperatorFilled)},
		metrics.Metric{Name: "Cycles", Unit: metrics.Count, Value: float64(r.Cycles)},
		metrics.Metric{Name: "StallAgeSeconds", Unit: metrics.Seconds, Value: r.StallAgeSeconds},
		metrics.Metric{Name: "ProofBlockedSeconds", Unit: metrics.Seconds, Value: r.ProofBlockedSeconds},
		metrics.Metric{Name: "Statements", Unit: metrics.Count, Value: float64(r.Statements)},
		metrics.Metric{Name: "PassDurationMs", Unit: metrics.Milliseconds, Value: float64(r.DurationMS)},
	)
}
