package relay

import (
	"log/slog"

	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// What a pass ended waiting on (Result.Waiting).
const (
	// WaitingLease: another pass holds the lease (RELAY_WATCH=false), or a
	// watching pass's budget ended before it was handed the lease.
	WaitingLease = "lease"
	// WaitingEvent: the stream stands at an event the target refused for
	// itself and that is not parked: with RELAY_MAX_ATTEMPTS=0, until a
	// person acts; otherwise until its attempts are spent.
	WaitingEvent = "event"
	// WaitingTarget: the target did not take the batch for a transient
	// reason (unreachable, throttling, a missing permission): it is sent
	// again.
	WaitingTarget = "target"
	// WaitingBudget: the budget ended a statement (a lock, most often).
	WaitingBudget = "budget"
)

// Result is what one pass did: the Lambda response, the log line and the
// metrics, from this one definition.
type Result struct {
	// Relay is RELAY_NAME; Target the ARN or queue URL.
	Relay  string `json:"relay"`
	Target string `json:"target"`
	// Position is the relay's committed position at the end, Head the
	// allocation head last read, Lag their difference (RelayLag).
	Position int64 `json:"position"`
	Head     int64 `json:"head"`
	Lag      int64 `json:"lag"`
	// Sent counts events the target accepted (RelaySent), re-sent ones
	// after a partial failure included; Skipped placeholders and events of
	// other topics, passed over unsent.
	Sent    int64 `json:"sent"`
	Skipped int64 `json:"skipped"`
	// Refused counts the target's refusals of an event for itself (each a
	// try of RELAY_MAX_ATTEMPTS), Parked the events parked (RelayParked),
	// Transient the messages not taken for a transient reason.
	Refused   int64 `json:"refused"`
	Parked    int64 `json:"parked"`
	Transient int64 `json:"transient"`
	// Resent counts parked events re-sent at an operator's request.
	Resent int64 `json:"resent"`
	// Batches is the batches read and wholly resolved; Calls the target's
	// API calls; MaxBatchMS the longest batch, read to commit
	// (RelayBatchMs).
	Batches    int   `json:"batches"`
	Calls      int   `json:"calls"`
	MaxBatchMS int64 `json:"max_batch_ms"`
	// Ticks counts looks at the stream.
	Ticks int `json:"ticks"`
	// Waiting is what the pass ended waiting on (Waiting*), null when it
	// was caught up.
	Waiting *string `json:"waiting"`
	// StoppedAt is the first event not sent when the pass ended behind
	// one, and LastError the target's last word on a failed message.
	StoppedAt *int64 `json:"stopped_at"`
	LastError string `json:"last_error,omitempty"`
	// The lease: how long the pass waited for it, whether it handed it to
	// the next invocation, and how often it took it back from one that
	// never acted as owner.
	LeaseWaitMS int64 `json:"lease_wait_ms"`
	HandedOver  bool  `json:"handed_over"`
	TakenBack   int   `json:"taken_back"`
	// Retries counts transient database errors recovered from.
	Retries int `json:"retries"`
	pass.Summary
}

func (r *Result) wait(what string) { r.Waiting = &what }

// WaitingFor is Waiting, "" for none.
func (r *Result) WaitingFor() string {
	if r.Waiting == nil {
		return ""
	}
	return *r.Waiting
}

// Level is the log line's level: an error, a warning when the stream
// stands at a refused event or a statement ran out of the budget,
// information otherwise.
func (r *Result) Level(err error) slog.Level {
	switch {
	case err != nil:
		return slog.LevelError
	case r.TimedOut != "" || r.WaitingFor() == WaitingEvent:
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

// Metrics are the EMF values of one pass: RelayRuns for the silence alarm,
// RelayLag for the lag alarm, RelayParked and RelayStopped (the stream
// stands at a refused event it may not park) for the parking alarms, and
// RelaySent and RelayBatchMs (the longest batch, only when there was one)
// for the dashboard.
func (r *Result) Metrics() []metrics.Metric {
	stopped := 0.0
	if r.WaitingFor() == WaitingEvent {
		stopped = 1
	}
	m := []metrics.Metric{
		{Name: "RelayRuns", Unit: metrics.Count, Value: 1},
		{Name: "RelaySent", Unit: metrics.Count, Value: float64(r.Sent)},
		{Name: "RelayParked", Unit: metrics.Count, Value: float64(r.Parked)},
		{Name: "RelayStopped", Unit: metrics.Count, Value: stopped},
		{Name: "RelayLag", Unit: metrics.Count, Value: float64(r.Lag)},
		{Name: "Statements", Unit: metrics.Count, Value: float64(r.Statements)},
		{Name: "PassDurationMs", Unit: metrics.Milliseconds, Value: float64(r.DurationMS)},
	}
	if r.Batches > 0 {
		m = append(m, metrics.Metric{Name: "RelayBatchMs", Unit: metrics.Milliseconds, Value: float64(r.MaxBatchMS)})
	}
	return m
}
