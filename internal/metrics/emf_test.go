package metrics

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEmitWritesEMF checks the one-line document CloudWatch needs to turn
// a log line into metrics: the _aws envelope naming namespace, dimension set
// and each metric, and every value and dimension at the top level.
func TestEmitWritesEMF(t *testing.T) {
	var out bytes.Buffer
	e := &Emitter{Function: "fill", Stack: "billing-outbox", Out: &out, Now: func() time.Time { return time.UnixMilli(1700000000123) }}
	if err := e.Emit(Metric{"Filled", Count, 3}, Metric{"Lag", None, 0}); err != nil {
		t.Fatal(err)
	}
	if bytes.Count(out.Bytes(), []byte("\n")) != 1 {
		t.Fatalf("want one line, got %q", out.String())
	}
	var doc struct {
		AWS struct {
			Timestamp         int64
			CloudWatchMetrics []struct {
				Namespace  string
				Dimensions [][]string
				Metrics    []struct{ Name, Unit string }
			}
		} `json:"_aws"`
		Function string
		Stack    string
		Filled   float64
		Lag      *float64
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.AWS.Timestamp != 1700000000123 {
		t.Errorf("_aws.Timestamp = %d, want the clock's 1700000000123", doc.AWS.Timestamp)
	}
	cw := doc.AWS.CloudWatchMetrics
	if len(cw) != 1 {
		t.Fatalf("_aws.CloudWatchMetrics = %+v, want one directive", cw)
	}
	if cw[0].Namespace != Namespace {
		t.Errorf("Namespace = %q, want %q", cw[0].Namespace, Namespace)
	}
	if want := [][]string{{DimensionStack, DimensionFunction}}; !slices.EqualFunc(cw[0].Dimensions, want, slices.Equal) {
		t.Errorf("Dimensions = %v, want %v", cw[0].Dimensions, want)
	}
	if doc.Function != "fill" {
		t.Errorf("Function = %q, want fill", doc.Function)
	}
	if doc.Stack != "billing-outbox" {
		t.Errorf("Stack = %q, want billing-outbox", doc.Stack)
	}
	if len(cw[0].Metrics) != 2 {
		t.Fatalf("Metrics = %+v, want Filled and Lag", cw[0].Metrics)
	}
	if m := cw[0].Metrics[0]; m.Name != "Filled" {
		t.Errorf("Metrics[0].Name = %q, want Filled", m.Name)
	}
	if m := cw[0].Metrics[0]; m.Unit != Count {
		t.Errorf("Metrics[0].Unit = %q, want %q", m.Unit, Count)
	}
	if doc.Filled != 3 {
		t.Errorf("Filled = %v, want 3", doc.Filled)
	}
	if doc.Lag == nil || *doc.Lag != 0 {
		t.Errorf("Lag = %v, want a 0 present at the top level", doc.Lag)
	}
}

// Two stacks in one account and region: a metric without its stack would
// mix their figures, so an Emitter never leaves the dimension out.
func TestEmitWithoutAStackNamesTheDefault(t *testing.T) {
	var out bytes.Buffer
	if err := (&Emitter{Function: "sweep", Out: &out}).Emit(Metric{"SweepRuns", Count, 1}); err != nil {
		t.Fatal(err)
	}
	var doc struct{ Stack string }
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Stack != DefaultStack {
		t.Errorf("Stack = %q, want %q", doc.Stack, DefaultStack)
	}
}

func TestValidStack(t *testing.T) {
	for _, ok := range []string{"outboxkeeper", "a", "Billing-Outbox-2"} {
		if err := ValidStack(ok); err != nil {
			t.Errorf("ValidStack(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "2fast", "has space", "under_score", "x" + strings.Repeat("y", 128)} {
		if ValidStack(bad) == nil {
			t.Errorf("ValidStack(%q) = nil, want a refusal", bad)
		}
	}
}

func TestEmitNothingWritesNothing(t *testing.T) {
	var out bytes.Buffer
	if err := (&Emitter{Function: "sweep", Out: &out}).Emit(); err != nil {
		t.Fatalf("Emit(): %v", err)
	}
	if out.Len() != 0 {
		t.Errorf("Emit() wrote %q, want nothing", out.String())
	}
}
