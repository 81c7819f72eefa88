package compensate

import (
	"context"
	"log/slog"

	"github.com/aws/aws-lambda-go/events"
)

// Handle is the Lambda handler: one batch, one JSON log line, one EMF
// line, and the partial batch response. It never returns an error: an
// error would fail the whole batch, and failures are reported per message.
// The context carries the Lambda request, which the logger turns into the
// line's requestId.
func (s *Service) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	res, _ := s.RunOnce(ctx, ev)
	level := slog.LevelInfo
	if res.Failed > 0 {
		level = slog.LevelWarn
	}
	s.opts.Logger.LogAttrs(ctx, level, "compensate batch", slog.Any("", res))
	if err := s.opts.Metrics.Emit(res.Metrics()...); err != nil {
		s.opts.Logger.ErrorContext(ctx, "compensate: emit metrics", slog.String("error", err.Error()))
	}
	return res.Response(), nil
}
