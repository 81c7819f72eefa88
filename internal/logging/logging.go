// Package logging sets up the functions' structured logs: one JSON line per
// event with level, message and the Lambda requestId.
package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// Setup installs the functions' logger as slog's default and returns it:
// JSON on stdout whatever AWS_LAMBDA_LOG_FORMAT says (aws-lambda-go's own
// handler picks JSON only when Lambda's log format is JSON, and reads that
// once, at package init), at the level AWS_LAMBDA_LOG_LEVEL names, with
// Lambda's key names (timestamp, message) and the requestId of the
// invocation a line belongs to.
func Setup() *slog.Logger {
	logger := slog.New(&requestID{slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{
		Level:       level(os.Getenv("AWS_LAMBDA_LOG_LEVEL")),
		ReplaceAttr: lambdacontext.ReplaceAttr,
	})})
	slog.SetDefault(logger)
	return logger
}

func level(name string) slog.Level {
	switch name {
	case "TRACE", "DEBUG":
		return slog.LevelDebug
	case "WARN":
		return slog.LevelWarn
	case "ERROR", "FATAL":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// requestID adds the invocation's requestId to every record logged with
// its context.
type requestID struct{ slog.Handler }

func (h *requestID) Handle(ctx context.Context, r slog.Record) error {
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		r.AddAttrs(slog.String("requestId", lc.AwsRequestID))
	}
	return h.Handler.Handle(ctx, r)
}

func (h *requestID) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &requestID{h.Handler.WithAttrs(attrs)}
}

func (h *requestID) WithGroup(name string) slog.Handler {
	return &requestID{h.Handler.WithGroup(name)}
}

// InitFailed ends a function's init: the log line says what failed (a bad
// variable is named by the config error) and the exit makes Lambda report
// an init error, so a broken deployment shows before the first pass.
func InitFailed(logger *slog.Logger, function, what string, err error) {
	logger.Error(function+": init failed: "+what, slog.String("error", err.Error()))
	os.Exit(1)
}

// JSONValue is a slog value holding v's JSON fields under their JSON
// names, so a pass's log line and its Lambda response say the same thing
// in the same words. Logged with an empty key, the fields are inlined. The
// fields keep v's field order (a map would shuffle them on every line), and
// numbers stay json.Number: a float64 would round an xid above 2^53.
func JSONValue(v any) slog.Value {
	b, err := json.Marshal(v)
	if err != nil {
		return slog.StringValue(err.Error())
	}
	attrs, err := orderedFields(b)
	if err != nil {
		return slog.StringValue(err.Error())
	}
	return slog.GroupValue(attrs...)
}

// orderedFields reads a JSON object's members in the order they appear.
func orderedFields(object []byte) ([]slog.Attr, error) {
	dec := json.NewDecoder(bytes.NewReader(object))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("logging: want a JSON object, got %v (%v)", tok, err)
	}
	var attrs []slog.Attr
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var value any
		if err := dec.Decode(&value); err != nil {
			return nil, err
		}
		attrs = append(attrs, slog.Any(tok.(string), value))
	}
	return attrs, nil
}
