// Command echo is the harness's own test function: it answers with its input
// and one environment variable, logs one JSON line, and fails or outlives its
// timeout on request, so the tests cover success, function errors, timeouts
// and logs.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
)

type response struct {
	Input json.RawMessage `json:"input"`
	Env   string          `json:"env"`
}

func main() {
	logger := lambdacontext.NewLogger()
	lambda.Start(func(ctx context.Context, in json.RawMessage) (response, error) {
		logger.InfoContext(ctx, "echo", "bytes", len(in))
		var req struct {
			Fail  bool   `json:"fail"`
			Sleep string `json:"sleep"` // a time.Duration
		}
		_ = json.Unmarshal(in, &req)
		if req.Fail {
			return response{}, errors.New("asked to fail")
		}
		if d, err := time.ParseDuration(req.Sleep); err == nil {
			time.Sleep(d) // not ctx-aware: plays a handler that overruns
		}
		return response{Input: in, Env: os.Getenv("ECHO_VAR")}, nil
	})
}
