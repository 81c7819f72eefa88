package pass

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/outboxkeeper/outboxkeeper/internal/logging"
	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
)

// Report is what a pass's Result is to the Handler: its JSON fields are
// the log line, Level picks the line's level for RunOnce's error, and
// Metrics are the EMF values.
type Report interface {
	Level(err error) slog.Level
	Metrics() []metrics.Metric
}

// Handler is a pass's Lambda handler: it runs the pass, writes one JSON
// log line (every field of the Result, under its JSON names) and one EMF
// line, and turns (Result, error) into the function's answer with Respond.
// Metrics are emitted for a failed pass too: what it did stays done.
type Handler[In any, R Report, Out any] struct {
	// Name is the pass's name: the log line's message is "<Name> pass"
	// unless Message says otherwise.
	Name string
	// Run is the pass's RunOnce.
	Run func(ctx context.Context, in In) (R, error)
	// Respond maps the outcome to the answer (Response for a scheduled
	// pass).
	Respond func(res R, err error) (Out, error)
	// Message, when set, is the log line's message for res.
	Message func(res R) string
	// Options are the logger and the metrics (nil: no metrics): the
	// Service's own, so a test that swaps its logger swaps this one's.
	Options *Options
}

// Handle is the function's Lambda handler.
func (h *Handler[In, R, Out]) Handle(ctx context.Context, in In) (Out, error) {
	res, err := h.Run(ctx, in)
	msg := h.Name + " pass"
	if h.Message != nil {
		msg = h.Message(res)
	}
	h.Options.Logger.LogAttrs(ctx, res.Level(err), msg, slog.Any("", logging.JSONValue(res)))
	if h.Options.Metrics != nil {
		if mErr := h.Options.Metrics.Emit(res.Metrics()...); mErr != nil {
			h.Options.Logger.WarnContext(ctx, h.Name+": emit metrics", slog.String("error", mErr.Error()))
		}
	}
	return h.Respond(res, err)
}

// Response is a scheduled pass's answer: the Result as the response, or
// the error, so Lambda counts a pass the database failed for (its Errors
// metric). Waiting, and a statement the budget ended, are not errors.
func Response[R any](res R, err error) (R, error) {
	if err != nil {
		var none R
		return none, err
	}
	return res, nil
}

// String is a Result as its JSON response, so a printed Result shows its
// pointers by value.
func String(res any) string {
	b, err := json.Marshal(res)
	if err != nil {
		return fmt.Sprintf("unprintable %T: %v", res, err)
	}
	return string(b)
}
