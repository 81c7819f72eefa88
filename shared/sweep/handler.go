package sweep

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/outboxkeeper/outboxkeeper/shared/metrics"
)

// Handler is the Lambda entry point around a Sweeper: one pass per
// invocation, one JSON log line and one EMF line per pass.
type Handler struct {
	Sweeper *Sweeper
	Log     *slog.Logger     // default slog.Default()
	Metrics *metrics.Emitter // default metrics.New("sweep")
}

// Handle runs one pass. The input is ignored: an EventBridge scheduled
// event, a Scheduler Input or {} all mean "sweep now".
func (h *Handler) Handle(ctx context.Context, _ json.RawMessage) (Result, error) {
	log := h.Log
	if log == nil {
		log = slog.Default()
	}
	em := h.Metrics
	if em == nil {
		em = metrics.New("sweep")
	}
	res, err := h.Sweeper.RunOnce(ctx)
	attrs := []any{
		"reset", res.Reset, "dead", res.Dead, "stuck_pending", res.StuckPending,
		"open", res.Open, "oldest_open_age_s", res.OldestOpenAgeS, "woken", res.Woken,
		"batches", res.Batches, "more", res.More, "statements", res.Statements, "duration_ms", res.DurationMs,
	}
	if err != nil {
		log.ErrorContext(ctx, "sweep pass failed", append(attrs, "error", err.Error())...)
	} else {
		log.InfoContext(ctx, "sweep pass", attrs...)
	}
	// Metrics even for a failed pass: the rows it did move were moved.
	if mErr := em.Emit(passMetrics(res)...); mErr != nil {
		log.WarnContext(ctx, "emit metrics", "error", mErr.Error())
	}
	return res, err
}

// passMetrics are the EMF values of one pass. The open-work gauges are left
// out when the pass failed before reading them, rather than reported as 0.
func passMetrics(res Result) []metrics.Metric {
	m := []metrics.Metric{
		{Name: "SweepRuns", Unit: metrics.Count, Value: 1},
		{Name: "Redeliveries", Unit: metrics.Count, Value: float64(res.Reset)},
		{Name: "DeadLettered", Unit: metrics.Count, Value: float64(res.Dead)},
	}
	if res.counted {
		m = append(m,
			metrics.Metric{Name: "OpenDeliveries", Unit: metrics.Count, Value: float64(res.Open)},
			metrics.Metric{Name: "OldestOpenAgeSeconds", Unit: metrics.Seconds, Value: res.OldestOpenAgeS},
		)
	}
	return append(m, metrics.Metric{Name: "PassDurationMs", Unit: metrics.Milliseconds, Value: float64(res.DurationMs)})
}
