package prune

import (
	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// Result is what one pass did: the Lambda response, the log line (LogValue)
// and the metrics (Metrics), from this one definition.
type Result struct {
	// DeletedDeliveries is every delivery deleted: DeletedAcked +
	// DeletedDead.
	DeletedDeliveries int64 `json:"deleted_deliveries"`
	DeletedAcked      int64 `json:"deleted_acked"`
	DeletedDead       int64 `json:"deleted_dead"`
	// DeletedEvents counts events (real and placeholders) deleted.
	DeletedEvents int64 `json:"deleted_events"`
	// KeptForConsumer names the registered consumer whose position bounded
	// the event prune below the fill watermark, null when none did (or
	// events are kept).
	KeptForConsumer *string `json:"kept_for_consumer"`
	// Watermark and EventsUpto are what bounded the event prune: the fill
	// watermark and the highest sequence the pass could delete (the
	// watermark or the slowest consumer's position). Null when events are
	// kept.
	Watermark  *int64 `json:"watermark"`
	EventsUpto *int64 `json:"events_upto"`
	// Batches is the number of delete statements sent.
	Batches int `json:"batches"`
	// More says the pass ended on its budget with work left; the next
	// pass continues.
	More bool `json:"more"`
	// Summary is timed_out, statements, duration_ms and error.
	pass.Summary
}

// bound records what bounds the event prune.
func (r *Result) bound(b store.PruneBound) {
	w, upto := b.Watermark, b.Upto()
	r.Watermark, r.EventsUpto = &w, &upto
	if b.Slowest != nil && b.Slowest.Position < b.Watermark {
		name := b.Slowest.Name
		r.KeptForConsumer = &name
	}
}

// String is the Result as its JSON response.
func (r *Result) String() string { return pass.String(r) }

// Metrics are the EMF values of one pass.
func (r *Result) Metrics() []metrics.Metric {
	return []metrics.Metric{
		{Name: "PruneRuns", Unit: metrics.Count, Value: 1},
		{Name: "DeletedDeliveries", Unit: metrics.Count, Value: float64(r.DeletedDeliveries)},
		{Name: "DeletedEvents", Unit: metrics.Count, Value: float64(r.DeletedEvents)},
		{Name: "Statements", Unit: metrics.Count, Value: float64(r.Statements)},
		{Name: "PassDurationMs", Unit: metrics.Milliseconds, Value: float64(r.DurationMS)},
	}
}
