package sweep

import (
	"context"
	"encoding/json"
	"log/slog"
)

// Handle is the Lambda handler: one pass per invocation, one JSON log line
// and one EMF line per pass, the Result as the response. The input is
// ignored: an EventBridge scheduled event, a Scheduler Input or {} all mean
// "sweep now". Metrics are emitted even for a failed pass: the rows it did
// move were moved.
func (s *Service) Handle(ctx context.Context, _ json.RawMessage) (*Result, error) {
	res, err := s.RunOnce(ctx)
	level := slog.LevelInfo
	switch {
	case err != nil:
		level = slog.LevelError
	case res.TimedOut != "":
		level = slog.LevelWarn
	}
	s.opts.Logger.LogAttrs(ctx, level, "sweep pass", slog.Any("", res))
	if mErr := s.opts.Metrics.Emit(res.Metrics()...); mErr != nil {
		s.opts.Logger.WarnContext(ctx, "sweep: emit metrics", slog.String("error", mErr.Error()))
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}
