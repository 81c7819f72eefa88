package migrateresource

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/cfn"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/stall"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// silentResponseURL accepts every request and never answers it, until
// the test ends.
func silentResponseURL(t *testing.T) string {
	t.Helper()
	return stall.Server(t).URL + "/cloudformation-custom-resource-response-useast1/stack?X-Amz-Signature=secret-signature"
}

// A ResponseURL that accepts and never answers must not take the whole
// invocation: the PUT gives up LogReserve before the deadline, the
// request is answered as not responded (so Lambda retries it), and the log
// line is written while the invocation still runs.
func TestSilentResponseURLKeepsTimeForTheLogLine(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	svc, err := New(func(context.Context) (DB, error) { return nil, errors.New("Delete never logs in") }, Config{},
		Options{Options: pass.Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), LogReserve+1500*time.Millisecond)
	defer cancel()
	ev := cfn.Event{RequestType: cfn.RequestDelete, RequestID: "r", LogicalResourceID: "Migrations",
		PhysicalResourceID: "outboxkeeper-migrations-outbox", ResponseURL: silentResponseURL(t)}

	err = svc.Handle(ctx, ev)
	if ctx.Err() != nil {
		t.Fatalf("Handle returned after the invocation's deadline (%v): no time was kept for the log line", ctx.Err())
	}
	if err == nil {
		t.Fatal("Handle returned nil for a response that never reached CloudFormation; Lambda must retry it")
	}
	var line struct {
		Level         string `json:"level"`
		Responded     bool   `json:"responded"`
		ResponseError string `json:"response_error"`
	}
	if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
		t.Fatalf("no log line: %v\n%s", err, logs.String())
	}
	t.Logf("response_error: %s", line.ResponseError)
	if line.Level != "ERROR" || line.Responded {
		t.Errorf("log line level %s, responded %v; want ERROR, false", line.Level, line.Responded)
	}
	for _, want := range []string{"no answer within", "127.0.0.1", "less " + LogReserve.String()} {
		if !strings.Contains(line.ResponseError, want) {
			t.Errorf("response_error %q does not say %q", line.ResponseError, want)
		}
	}
	if strings.Contains(logs.String(), "secret-signature") {
		t.Errorf("the log prints the pre-signed URL's signature:\n%s", logs.String())
	}
}
