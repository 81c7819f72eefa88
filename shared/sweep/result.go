package sweep

import (
	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// Result is what one pass did: the Lambda response, the log line (LogValue)
// and the metrics (Metrics), from this one definition.
type Result struct {
	// Reset is how many delivered rows went back to pending.
	Reset int64 `json:"reset"`
	// Dead is how many stuck rows had used up their redeliveries.
	Dead int64 `json:"dead"`
	// StuckPending counts pending rows created longer than StuckAfter ago,
	// as found at the start of the pass (so rows this pass reset are not
	// counted twice). They are not changed; the wake is for them.
	StuckPending int64 `json:"stuck_pending"`
	// Open and OldestOpenAgeS describe the pending and delivered rows at
	// the start of the pass: how many, and the age in seconds of the
	// oldest by created_at (0 when none).
	Open           int64   `json:"open"`
	OldestOpenAgeS float64 `json:"oldest_open_age_s"`
	// ConsumerLag is the largest lag of a registered consumer (or relay)
	// behind the allocation head; ConsumersHolding counts those holding
	// retention back (their oldest untaken event is past the prune's
	// retention), and ConsumerHeldS is the longest any has, in seconds.
	ConsumerLag      int64   `json:"consumer_lag"`
	ConsumersHolding int64   `json:"consumers_holding_retention"`
	ConsumerHeldS    float64 `json:"consumer_held_s"`
	// Woken says the relay was notified (any stuck work found).
	Woken bool `json:"woken"`
	// Batches is the number of reset statements sent.
	Batches int `json:"batches"`
	// More says the pass ended on its budget with stuck rows left; the next
	// pass continues.
	More bool `json:"more"`
	// Summary is timed_out, statements, duration_ms and error.
	pass.Summary

	counted       bool // Open/OldestOpenAgeS were read (metrics skip them if not)
	consumersRead bool // the consumer figures were read
}

// String is the Result as its JSON response.
func (r *Result) String() string { return pass.String(r) }

// Metrics are the EMF values of one pass. The open-work gauges are left out
// when the pass failed before reading them, rather than reported as 0.
func (r *Result) Metrics() []metrics.Metric {
	m := []metrics.Metric{
		{Name: "SweepRuns", Unit: metrics.Count, Value: 1},
		{Name: "Redeliveries", Unit: metrics.Count, Value: float64(r.Reset)},
		{Name: "DeadLettered", Unit: metrics.Count, Value: float64(r.Dead)},
	}
	if r.counted {
		m = append(m,
			metrics.Metric{Name: "OpenDeliveries", Unit: metrics.Count, Value: float64(r.Open)},
			metrics.Metric{Name: "OldestOpenAgeSeconds", Unit: metrics.Seconds, Value: r.OldestOpenAgeS},
		)
	}
	if r.consumersRead {
		m = append(m,
			metrics.Metric{Name: "ConsumerLag", Unit: metrics.Count, Value: float64(r.ConsumerLag)},
			metrics.Metric{Name: "ConsumersHoldingRetention", Unit: metrics.Count, Value: float64(r.ConsumersHolding)},
			metrics.Metric{Name: "ConsumerHeldSeconds", Unit: metrics.Seconds, Value: r.ConsumerHeldS},
		)
	}
	return append(m, metrics.Metric{Name: "PassDurationMs", Unit: metrics.Milliseconds, Value: float64(r.DurationMS)})
}
