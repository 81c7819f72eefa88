package compensate

import (
	"log/slog"
	"slices"

	"github.com/aws/aws-lambda-go/events"

	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// Message is the outcome of one SQS message.
type Message struct {
	MessageID string  `json:"message_id"`
	Outcome   Outcome `json:"outcome"`
	Reason    string  `json:"reason,omitempty"`
}

// Result is one batch: the log line (LogValue) and the metrics (Metrics)
// from this one definition, and what the tests assert on. The Lambda
// response is Response(), the partial batch response SQS reads.
type Result struct {
	Received int `json:"received"`
	// Filled is the placeholders this batch wrote; AlreadyPresent the
	// fillable sequences that were present already (committed rows,
	// earlier fills, a duplicate delivery).
	Filled         int `json:"filled"`
	AlreadyPresent int `json:"already_present"`
	Deferred       int `json:"deferred"`
	Dropped        int `json:"dropped"`
	Invalid        int `json:"invalid"`
	// Failed counts messages reported failed for an error (database, DLQ
	// send, no DLQ configured); deferred messages are reported failed too
	// but counted in Deferred only.
	Failed int `json:"failed"`
	// Head is the allocation head the check read (0 if it did not run).
	Head int64 `json:"head"`
	// FilledRange is the [min, max] notified, when anything was written.
	FilledRange []int64 `json:"filled_range,omitempty"`
	// Retries of transient database errors.
	Retries int `json:"retries"`
	// Summary is statements (sent to the database, retries included),
	// duration_ms, and error: every database or SQS error that kept a
	// message from its outcome. timed_out is never set: a statement the
	// budget ended fails its messages.
	pass.Summary
	Messages []Message `json:"messages"`

	failures []events.SQSBatchItemFailure
}

// Response is the partial batch response: the messages SQS must hand out
// again. Everything else is deleted by the event source mapping.
func (r *Result) Response() events.SQSEventResponse {
	return events.SQSEventResponse{BatchItemFailures: slices.Clone(r.failures)}
}

// String is the Result as JSON.
func (r *Result) String() string { return pass.String(r) }

// Level is the log line's level: a warning when any message failed.
func (r *Result) Level(error) slog.Level {
	if r.Failed > 0 {
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

// Metrics are the EMF values of one batch.
func (r *Result) Metrics() []metrics.Metric {
	return []metrics.Metric{
		{Name: "Received", Unit: metrics.Count, Value: float64(r.Received)},
		{Name: "Filled", Unit: metrics.Count, Value: float64(r.Filled)},
		{Name: "AlreadyPresent", Unit: metrics.Count, Value: float64(r.AlreadyPresent)},
		{Name: "Deferred", Unit: metrics.Count, Value: float64(r.Deferred)},
		{Name: "Dropped", Unit: metrics.Count, Value: float64(r.Dropped)},
		{Name: "Invalid", Unit: metrics.Count, Value: float64(r.Invalid)},
		{Name: "Failed", Unit: metrics.Count, Value: float64(r.Failed)},
		{Name: "DurationMs", Unit: metrics.Milliseconds, Value: float64(r.DurationMS)},
	}
}
