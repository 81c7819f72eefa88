package local

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/repo"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// The driver's emulation settings come from the real template.yaml, so a
// change there changes the local runs.
func TestReadTemplateTakesTheDeployedSettings(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := ReadTemplate(filepath.Join(root, "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, input := range map[string][]byte{"fill": tm.FillInput, "sweep": tm.SweepInput, "prune": tm.PruneInput} {
		var doc map[string]any
		if err := json.Unmarshal(input, &doc); err != nil {
			t.Errorf("%s Input %q is not JSON: %v", name, input, err)
		}
	}
	if tm.FunctionTimeout <= 0 {
		t.Errorf("FunctionTimeout = %s, want > 0", tm.FunctionTimeout)
	}
	if tm.BatchSize < 1 || tm.BatchSize > 10000 {
		t.Errorf("BatchSize = %d, want 1 to 10000", tm.BatchSize)
	}
	if tm.MaxReceiveCount < 1 {
		t.Errorf("MaxReceiveCount = %d, want >= 1", tm.MaxReceiveCount)
	}
	// MaxConcurrency comes through !Ref CompensateMaxConcurrency's default;
	// the SQS event source accepts 2 to 1000.
	if tm.MaxConcurrency < 2 || tm.MaxConcurrency > 1000 {
		t.Errorf("MaxConcurrency = %d, want 2 to 1000", tm.MaxConcurrency)
	}
	// AWS's rule for SQS event sources, which the driver inherits.
	if tm.VisibilityTimeout < 6*tm.FunctionTimeout {
		t.Errorf("visibility %s < 6 x timeout %s", tm.VisibilityTimeout, tm.FunctionTimeout)
	}
	if tm.BatchingWindow < 0 || tm.BatchingWindow > 300*time.Second {
		t.Errorf("BatchingWindow = %s, want 0 to 300s", tm.BatchingWindow)
	}
	if tm.FillSchedule != time.Minute {
		t.Errorf("FillSchedule = %s, want the template's rate(1 minute)", tm.FillSchedule)
	}
	if tm.SweepSchedule != time.Minute {
		t.Errorf("SweepSchedule = %s, want the template's rate(1 minute)", tm.SweepSchedule)
	}
	if tm.PruneSchedule != time.Hour {
		t.Errorf("prune schedule %s, want the template's rate(1 hour)", tm.PruneSchedule)
	}
	if got := tm.Env["prune"]["PRUNE_ACKED_AFTER"]; got != "24h" {
		t.Errorf("prune's PRUNE_ACKED_AFTER from the template = %q, want its parameter default 24h", got)
	}
	if tm.FillConcurrency != 2 {
		t.Errorf("FillConcurrency = %d, want 2 (the hand-over)", tm.FillConcurrency)
	}
	if got := tm.Env["fill"]["FILL_PASS_BUDGET"]; got != "85s" {
		t.Errorf("fill's FILL_PASS_BUDGET from the template = %q, want its parameter default 85s", got)
	}
	if tm.RelaySchedule != time.Minute {
		t.Errorf("RelaySchedule = %s, want the template's rate(1 minute)", tm.RelaySchedule)
	}
	var relayInput map[string]any
	if err := json.Unmarshal(tm.RelayInput, &relayInput); err != nil {
		t.Errorf("relay Input %q is not JSON: %v", tm.RelayInput, err)
	}
	if tm.RelayConcurrency != 2 {
		t.Errorf("RelayConcurrency = %d, want 2 (the hand-over)", tm.RelayConcurrency)
	}
	if tm.RelayTimeout != 90*time.Second {
		t.Errorf("RelayTimeout = %s, want the relay function's 90s", tm.RelayTimeout)
	}
	if tm.RelayMemory != 128 {
		t.Errorf("RelayMemory = %d, want the relay function's 128", tm.RelayMemory)
	}
	if got := tm.Env["relay"]["RELAY_PASS_BUDGET"]; got != "85s" {
		t.Errorf("relay's RELAY_PASS_BUDGET from the template = %q, want its parameter default 85s", got)
	}
	if got := tm.Env["relay"]["RELAY_WATCH"]; got != "true" {
		t.Errorf("relay's RELAY_WATCH from the template = %q, want its parameter default true", got)
	}
	if _, ok := tm.Env["relay"]["RELAY_SOURCE"]; ok {
		t.Error("RELAY_SOURCE, which the template sets only when RelaySource is, was taken for a literal")
	}
	if got := tm.Env["sweep"]["OUTBOX_SCHEMA"]; got != "outbox" {
		t.Errorf("sweep's OUTBOX_SCHEMA from Globals = %q, want outbox", got)
	}
	if _, ok := tm.Env["fill"]["DATABASE_URL"]; ok {
		t.Error("a value the template computes (!If) was taken for a literal")
	}
}

func TestParseRateReadsRateExpressionsOnly(t *testing.T) {
	for expr, want := range map[string]time.Duration{
		"rate(1 minute)": time.Minute, "rate(5 minutes)": 5 * time.Minute, "rate(1 hour)": time.Hour, "rate(2 days)": 48 * time.Hour,
	} {
		got, err := ParseRate(expr)
		if err != nil {
			t.Errorf("ParseRate(%q): %v", expr, err)
			continue
		}
		if got != want {
			t.Errorf("ParseRate(%q) = %s, want %s", expr, got, want)
		}
	}
	for _, bad := range []string{"cron(0 * * * ? *)", "rate(0 minutes)", "rate(1 fortnight)", "rate(minute)", "1 minute)", "rate(1 minute"} {
		if _, err := ParseRate(bad); err == nil {
			t.Errorf("ParseRate(%q) accepted", bad)
		}
	}
}

func TestReadTemplateNamesWhatIsMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.yaml")
	if err := writeFile(path, "Globals: {Function: {Timeout: 30}}\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadTemplate(path); err == nil {
		t.Fatal("a template without the functions was accepted")
	}
}

// failedItems applies Lambda's partial batch response rules.
func TestFailedItemsFollowLambdasPartialBatchRules(t *testing.T) {
	batch := []types.Message{{MessageId: aws.String("a")}, {MessageId: aws.String("b")}}
	cases := []struct {
		name   string
		resp   string
		failed []string
		whole  bool
	}{
		{"empty response: all succeeded", ``, nil, false},
		{"null: all succeeded", `null`, nil, false},
		{"no failures", `{"batchItemFailures":[]}`, nil, false},
		{"one failed", `{"batchItemFailures":[{"itemIdentifier":"b"}]}`, []string{"b"}, false},
		{"unknown id fails the batch", `{"batchItemFailures":[{"itemIdentifier":"zz"}]}`, nil, true},
		{"empty id fails the batch", `{"batchItemFailures":[{"itemIdentifier":""}]}`, nil, true},
		{"not a response fails the batch", `"oops"`, nil, true},
	}
	for _, c := range cases {
		failed, whole := failedItems(json.RawMessage(c.resp), batch)
		if whole != c.whole {
			t.Errorf("%s: whole batch failed = %v, want %v", c.name, whole, c.whole)
			continue
		}
		if whole {
			continue // the items do not matter when the whole batch fails
		}
		if len(failed) != len(c.failed) {
			t.Errorf("%s: failed items %v, want %v", c.name, failed, c.failed)
		}
		for _, id := range c.failed {
			if !failed[id] {
				t.Errorf("%s: %s not failed", c.name, id)
			}
		}
	}
}

func writeFile(path, body string) error { return os.WriteFile(path, []byte(body), 0o644) }
