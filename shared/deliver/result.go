package deliver

import (
	"log/slog"

	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// Result is what one pass did: the Lambda response, the log line and the
// metrics, from this one definition.
type Result struct {
	// Claimed counts the deliveries the pass's claims took; Delivered
	// those a target accepted and that were acked (Delivered); PushFailed
	// those left delivered for the sweep (PushFailed).
	Claimed    int64 `json:"claimed"`
	Delivered  int64 `json:"delivered"`
	PushFailed int64 `json:"push_failed"`
	// Dead counts the deliveries the pass made dead, by reason
	// (unknown_recipient, recipient_disabled, gone): DeadByReason.
	Dead map[string]int64 `json:"dead"`
	// Lost counts acks or deaths that lost their compare-and-set: the
	// sweep had put the row back meanwhile, and it is pushed again.
	Lost int64 `json:"lost"`
	// Batches is the claims that took rows; Ticks the looks for pending
	// rows.
	Batches int `json:"batches"`
	Ticks   int `json:"ticks"`
	// OldestPendingS is the age of the oldest pending delivery as the pass
	// ended, in seconds (DeliverOldestPendingAge).
	OldestPendingS float64 `json:"oldest_pending_s"`
	// LastError is the last failed push's reason.
	LastError string `json:"last_error,omitempty"`
	// The lease, as the relay's.
	Waiting     bool  `json:"waiting_lease"`
	LeaseWaitMS int64 `json:"lease_wait_ms"`
	HandedOver  bool  `json:"handed_over"`
	TakenBack   int   `json:"taken_back"`
	// Retries counts transient database errors recovered from.
	Retries int `json:"retries"`
	pass.Summary
}

// Level is the log line's level: an error, a warning when a push failed
// or a statement ran out of the budget, information otherwise.
func (r *Result) Level(err error) slog.Level {
	switch {
	case err != nil:
		return slog.LevelError
	case r.TimedOut != "" || r.PushFailed > 0:
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

// Metrics are the EMF values of one pass: DeliverRuns for the silence
// alarm, Delivered and PushFailed, one Dead<Reason> per reason
// (DeadByReason), and DeliverOldestPendingAge for the backlog alarm.
func (r *Result) Metrics() []metrics.Metric {
	return []metrics.Metric{
		{Name: "DeliverRuns", Unit: metrics.Count, Value: 1},
		{Name: "Delivered", Unit: metrics.Count, Value: float64(r.Delivered)},
		{Name: "PushFailed", Unit: metrics.Count, Value: float64(r.PushFailed)},
		{Name: "DeadUnknownRecipient", Unit: metrics.Count, Value: float64(r.Dead[ReasonUnknownRecipient])},
		{Name: "DeadRecipientDisabled", Unit: metrics.Count, Value: float64(r.Dead[ReasonRecipientDisabled])},
		{Name: "DeadGone", Unit: metrics.Count, Value: float64(r.Dead[ReasonGone])},
		{Name: "DeliverOldestPendingAge", Unit: metrics.Seconds, Value: r.OldestPendingS},
		{Name: "Statements", Unit: metrics.Count, Value: float64(r.Statements)},
		{Name: "PassDurationMs", Unit: metrics.Milliseconds, Value: float64(r.DurationMS)},
	}
}
