// Package logging sets up the functions' structured logs: one JSON line per
// event with level, message and the Lambda requestId (aws-lambda-go's slog
// handler), whatever the function's LoggingConfig says.
package logging

import (
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// Setup installs the Lambda JSON logger as slog's default and returns it.
func Setup() *slog.Logger {
	// The handler picks JSON only when the Lambda log format says so; the
	// design promises JSON lines, also under aws-lambda-rie and in tests.
	if os.Getenv("AWS_LAMBDA_LOG_FORMAT") == "" {
		_ = os.Setenv("AWS_LAMBDA_LOG_FORMAT", "JSON")
	}
	logger := lambdacontext.NewLogger()
	slog.SetDefault(logger)
	return logger
}

// InitFailed ends a function's init: the log line says what failed (a bad
// variable is named by the config error) and the exit makes Lambda report
// an init error, so a broken deployment shows before the first pass.
func InitFailed(logger *slog.Logger, function, what string, err error) {
	logger.Error(function+": init failed: "+what, slog.String("error", err.Error()))
	os.Exit(1)
}
