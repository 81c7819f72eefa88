package fill

import (
	"context"
	"encoding/json"
	"log/slog"
)

// Handle is the Lambda handler: the input (an EventBridge Scheduler Input,
// a scheduled-event envelope, `{}`) says nothing the pass needs, so it is
// ignored. It runs one pass, writes one JSON log line and one EMF line, and
// returns the Result as the response. A database that failed for the whole
// budget is returned as an error, so Lambda counts it (the Errors metric);
// waiting, and a statement the budget ended, are not errors.
func (s *Service) Handle(ctx context.Context, _ json.RawMessage) (*Result, error) {
	res, err := s.RunOnce(ctx)
	s.record(ctx, res, err)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// record writes the pass's log line and metrics, both from the Result.
func (s *Service) record(ctx context.Context, res *Result, err error) {
	level := slog.LevelInfo
	switch {
	case err != nil:
		level = slog.LevelError
	case res.WaitingFor() == WaitingProof, res.TimedOut != "", res.ForeignMarkers > 0:
		// The operator's business: a blocked proof names the sessions
		// holding the horizon; a timed-out statement names what waited.
		level = slog.LevelWarn
	}
	s.opts.Logger.LogAttrs(ctx, level, "fill pass", slog.Any("", res))
	if mErr := s.opts.Metrics.Emit(res.Metrics()...); mErr != nil {
		s.opts.Logger.WarnContext(ctx, "fill: emit metrics", slog.String("error", mErr.Error()))
	}
}
