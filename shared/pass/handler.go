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
// line, and turns (Result, error) into the function's answer. Metrics are
// emitted for a failed pass too: what it did stays done. A Service embeds
// it, so its Handle is the Service's.
type Handler[In any, R Report, Out any] struct {
	name    string
	run     func(ctx context.Context, in In) (R, error)
	respond func(res R, err error) (Out, error)
	message func(res R) string
	opts    *Options
}

// NewHandler is the handler of the pass called name: run is its RunOnce,
// respond maps the outcome to the answer (Response for a scheduled pass),
// and opts are its logger and metrics (nil Metrics: none), the Service's
// own, so a test that swaps its logger swaps this one's. The log line's
// message is "<name> pass".
func NewHandler[In any, R Report, Out any](name string, opts *Options, run func(context.Context, In) (R, error),
	respond func(R, error) (Out, error)) *Handler[In, R, Out] {
	return &Handler[In, R, Out]{name: name, run: run, respond: respond, opts: opts,
		message: func(R) string { return name + " pass" }}
}

// Scheduled is the handler of a scheduled pass, whose input says nothing
// it needs and whose answer is its Result (Response).
func Scheduled[R Report](name string, opts *Options, run func(context.Context, json.RawMessage) (R, error)) *Handler[json.RawMessage, R, R] {
	return NewHandler(name, opts, run, Response[R])
}

// WithMessage makes message the log line's message.
func (h *Handler[In, R, Out]) WithMessage(message func(res R) string) *Handler[In, R, Out] {
	h.message = message
	return h
}

// Handle is the function's Lambda handler.
func (h *Handler[In, R, Out]) Handle(ctx context.Context, in In) (Out, error) {
	res, err := h.run(ctx, in)
	h.opts.Logger.LogAttrs(ctx, res.Level(err), h.message(res), slog.Any("", logging.JSONValue(res)))
	if h.opts.Metrics != nil {
		if mErr := h.opts.Metrics.Emit(res.Metrics()...); mErr != nil {
			h.opts.Logger.WarnContext(ctx, h.name+": emit metrics", slog.String("error", mErr.Error()))
		}
	}
	return h.respond(res, err)
}

// Lambda is Handle as lambda.Start takes it: what a function's main
// serves (internal/boot.Serve), whatever the handler's input and answer.
func (h *Handler[In, R, Out]) Lambda() any { return h.Handle }

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
