package metrics

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// TestEmitWritesEMF checks the one-line document CloudWatch needs to turn
// a log line into metrics: the _aws envelope naming namespace, dimension set
// and each metric, and every value and dimension at the top level.
func TestEmitWritesEMF(t *testing.T) {
	var out bytes.Buffer
	e := &Emitter{Function: "fill", Out: &out, Now: func() time.Time { return time.UnixMilli(1700000000123) }}
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
		Filled   float64
		Lag      *float64
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	cw := doc.AWS.CloudWatchMetrics
	if doc.AWS.Timestamp != 1700000000123 || len(cw) != 1 || cw[0].Namespace != Namespace {
		t.Fatalf("envelope = %+v", doc.AWS)
	}
	if len(cw[0].Dimensions) != 1 || len(cw[0].Dimensions[0]) != 1 || cw[0].Dimensions[0][0] != DimensionFunction || doc.Function != "fill" {
		t.Fatalf("dimensions = %v, Function = %q", cw[0].Dimensions, doc.Function)
	}
	if len(cw[0].Metrics) != 2 || cw[0].Metrics[0].Name != "Filled" || cw[0].Metrics[0].Unit != Count {
		t.Fatalf("metrics = %+v", cw[0].Metrics)
	}
	if doc.Filled != 3 || doc.Lag == nil || *doc.Lag != 0 {
		t.Fatalf("values: Filled=%v Lag=%v", doc.Filled, doc.Lag)
	}
}

func TestEmitNothingWritesNothing(t *testing.T) {
	var out bytes.Buffer
	if err := (&Emitter{Function: "sweep", Out: &out}).Emit(); err != nil || out.Len() != 0 {
		t.Fatalf("err=%v out=%q", err, out.String())
	}
}
