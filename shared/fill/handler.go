package fill

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/outboxkeeper/outboxkeeper/shared/metrics"
)

// Handle is the Lambda handler: the input (an EventBridge Scheduler Input,
// a scheduled-event envelope, `{}`) says nothing the pass needs, so it is
// ignored. It runs one pass, writes one JSON log line and one EMF line, and
// returns the Result as the response. A failed statement is returned as an
// error, so Lambda counts it (the Errors metric, retries); waiting is not.
func (s *Service) Handle(ctx context.Context, _ json.RawMessage) (*Result, error) {
	res, err := s.RunOnce(ctx)
	s.record(ctx, res, err)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// record writes the pass's log line and metrics.
func (s *Service) record(ctx context.Context, res *Result, err error) {
	level := slog.LevelInfo
	switch {
	case err != nil:
		level = slog.LevelError
	case res.WaitingFor() == WaitingProof:
		// A blocked proof is the operator's business: it names the
		// sessions holding the horizon.
		level = slog.LevelWarn
	}
	attrs := []slog.Attr{
		slog.Int64("watermark", res.Watermark),
		slog.Int64("head", res.Head),
		slog.Int64("lag", res.Lag),
		slog.Int64("filled", res.Filled),
		slog.Any("filled_min", res.FilledMin),
		slog.Any("filled_max", res.FilledMax),
		slog.Any("stalled_at", res.StalledAt),
		slog.Any("waiting", res.Waiting),
		slog.Any("blocked_by", res.BlockedBy),
		slog.Bool("historical", res.Historical),
		slog.Any("episode", res.Episode),
		slog.Float64("stall_age_s", res.StallAgeSeconds),
		slog.Float64("proof_blocked_s", res.ProofBlockedSeconds),
		slog.Int64("statements", res.Statements),
		slog.Int64("duration_ms", res.DurationMS),
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	s.opts.Logger.LogAttrs(ctx, level, "fill pass", attrs...)

	_ = s.opts.Metrics.Emit(passMetrics(res)...)
}

// passMetrics are the EMF metrics of one pass. A pass that never read the
// head (it waited on the lease, or failed first) reports no position: a
// zero Lag would hide the real one from the lag alarm, which takes the
// minute's minimum.
func passMetrics(res *Result) []metrics.Metric {
	var ms []metrics.Metric
	if res.headRead {
		ms = append(ms,
			metrics.Metric{Name: "Watermark", Unit: metrics.None, Value: float64(res.Watermark)},
			metrics.Metric{Name: "Head", Unit: metrics.None, Value: float64(res.Head)},
			metrics.Metric{Name: "Lag", Unit: metrics.Count, Value: float64(res.Lag)},
		)
	}
	return append(ms,
		metrics.Metric{Name: "Filled", Unit: metrics.Count, Value: float64(res.Filled)},
		metrics.Metric{Name: "StallAgeSeconds", Unit: metrics.Seconds, Value: res.StallAgeSeconds},
		metrics.Metric{Name: "ProofBlockedSeconds", Unit: metrics.Seconds, Value: res.ProofBlockedSeconds},
		metrics.Metric{Name: "Statements", Unit: metrics.Count, Value: float64(res.Statements)},
		metrics.Metric{Name: "PassDurationMs", Unit: metrics.Milliseconds, Value: float64(res.DurationMS)},
	)
}
