package compensate

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"

	"github.com/aws/aws-lambda-go/events"

	"github.com/outboxkeeper/outboxkeeper/internal/logging"
	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
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
	// Statements sent to the database, retries included.
	Statements int64 `json:"statements"`
	// Retries of transient database errors.
	Retries    int       `json:"retries"`
	Error      string    `json:"error,omitempty"`
	DurationMS int64     `json:"duration_ms"`
	Messages   []Message `json:"messages"`

	failures []events.SQSBatchItemFailure
}

// Response is the partial batch response: the messages SQS must hand out
// again. Everything else is deleted by the event source mapping.
func (r *Result) Response() events.SQSEventResponse {
	return events.SQSEventResponse{BatchItemFailures: slices.Clone(r.failures)}
}

// String is the Result as JSON.
func (r *Result) String() string {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Sprintf("unprintable compensate result: %v", err)
	}
	return string(b)
}

// LogValue makes the log line the Result: every JSON field, under the same
// names.
func (r *Result) LogValue() slog.Value { return logging.JSONValue(r) }

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
