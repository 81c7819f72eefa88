// Package metrics writes CloudWatch Embedded Metric Format lines: one JSON
// object per pass on stdout, which CloudWatch Logs turns into metrics with
// no API call from the function (and so no extra latency or IAM).
package metrics

import (
	"encoding/json"
	"io"
	"os"
	"sync"
	"time"
)

// Namespace is the CloudWatch namespace of every outboxkeeper metric; the
// template's alarms read the same name.
const Namespace = "Outboxkeeper"

// DimensionFunction is the one dimension: which function emitted it.
const DimensionFunction = "Function"

// Units used here (CloudWatch names).
const (
	Count        = "Count"
	Seconds      = "Seconds"
	Milliseconds = "Milliseconds"
	None         = "None"
)

// Metric is one value.
type Metric struct {
	Name  string
	Unit  string
	Value float64
}

// Emitter writes EMF lines for one function.
type Emitter struct {
	Function string
	Out      io.Writer // default os.Stdout
	Now      func() time.Time
	mu       sync.Mutex
}

// New returns an Emitter writing to stdout.
func New(function string) *Emitter { return &Emitter{Function: function} }

// Emit writes one EMF line carrying all values.
func (e *Emitter) Emit(values ...Metric) error {
	if len(values) == 0 {
		return nil
	}
	now := time.Now
	if e.Now != nil {
		now = e.Now
	}
	type def struct {
		Name string `json:"Name"`
		Unit string `json:"Unit"`
	}
	defs := make([]def, len(values))
	doc := map[string]any{DimensionFunction: e.Function}
	for i, v := range values {
		defs[i] = def{Name: v.Name, Unit: v.Unit}
		doc[v.Name] = v.Value
	}
	doc["_aws"] = map[string]any{
		"Timestamp": now().UnixMilli(),
		"CloudWatchMetrics": []any{map[string]any{
			"Namespace":  Namespace,
			"Dimensions": [][]string{{DimensionFunction}},
			"Metrics":    defs,
		}},
	}
	line, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	out := e.Out
	if out == nil {
		out = os.Stdout
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	_, err = out.Write(append(line, '\n'))
	return err
}
