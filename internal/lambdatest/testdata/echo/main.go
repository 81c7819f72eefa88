// Command echo is the harness's own test function: it answers with its input
// and one environment variable, logs one JSON line, and fails on request, so
// the lambdatest tests cover success, function errors and logs.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"

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
			Fail bool `json:"fail"`
		}
		_ = json.Unmarshal(in, &req)
		if req.Fail {
			return response{}, errors.New("asked to fail")
		}
		return response{Input: in, Env: os.Getenv("ECHO_VAR")}, nil
	})
}
