// Package metrics writes CloudWatch Embedded Metric Format lines: one JSON
// object per pass on stdout, which CloudWatch Logs turns into metrics with
// no API call from the function (and so no extra latency or IAM).
package metrics

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"regexp"
	"sync"
	"time"
)

// Namespace is the CloudWatch namespace of every outboxkeeper metric; the
// template's alarms read the same name.
const Namespace = "Outboxkeeper"

// Every metric has two dimensions: the stack the function belongs to
// (STACK_NAME, which the template sets from AWS::StackName), so two stacks
// in one account and region never mix their figures, and which function
// emitted it. The template's alarms and dashboard name both.
const (
	DimensionStack    = "Stack"
	DimensionFunction = "Function"
)

// DefaultStack is the Stack dimension when STACK_NAME is not set: the
// stack name samconfig.toml proposes.
const DefaultStack = "outboxkeeper"

// stackName is what CloudFormation accepts as a stack name, and so what
// AWS::StackName can be.
var stackName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9-]{0,127}$`)

// ValidStack reports why name cannot be a Stack dimension, or nil.
func ValidStack(name string) error {
	if !stackName.MatchString(name) {
		return errors.New("must be a CloudFormation stack name: a letter, then letters, digits or hyphens, at most 128")
	}
	return nil
}

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

// Emitter writes EMF lines for one function of one stack.
type Emitter struct {
	Function string
	// Stack is the Stack dimension; DefaultStack when empty.
	Stack string
	Out   io.Writer // default os.Stdout
	Now   func() time.Time
	mu    sync.Mutex
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
	stack := e.Stack
	if stack == "" {
		stack = DefaultStack
	}
	doc := map[string]any{DimensionStack: stack, DimensionFunction: e.Function}
	for i, v := range values {
		defs[i] = def{Name: v.Name, Unit: v.Unit}
		doc[v.Name] = v.Value
	}
	doc["_aws"] = map[string]any{
		"Timestamp": now().UnixMilli(),
		"CloudWatchMetrics": []any{map[string]any{
			"Namespace":  Namespace,
			"Dimensions": [][]string{{DimensionStack, DimensionFunction}},
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
