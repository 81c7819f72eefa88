package local

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Template is what the local driver copies from template.yaml, so the
// emulation cannot drift from what AWS would run: the schedules (period and
// Input), the functions' timeouts, memory and concurrency, and the queue
// and event source mapping settings.
type Template struct {
	// FunctionTimeout is Globals.Function.Timeout; FillTimeout the fill
	// function's own.
	FunctionTimeout, FillTimeout time.Duration
	// FunctionMemory and FillMemory are the MemorySize, in MB.
	FunctionMemory, FillMemory int
	// FillSchedule, SweepSchedule and PruneSchedule are the ScheduleV2
	// rates.
	FillSchedule, SweepSchedule, PruneSchedule time.Duration
	// FillInput, SweepInput and PruneInput are the ScheduleV2 events' Input.
	FillInput, SweepInput, PruneInput []byte
	// FillConcurrency is the fill's ReservedConcurrentExecutions: how many
	// of its passes may run at once (two, for the hand-over).
	FillConcurrency int
	// The relay function's (deployed when RelayTarget is set): its
	// schedule's rate and Input, its Timeout and MemorySize, and its
	// ReservedConcurrentExecutions (two, for the hand-over, as the fill's).
	RelaySchedule    time.Duration
	RelayInput       []byte
	RelayTimeout     time.Duration
	RelayMemory      int
	RelayConcurrency int
	// Env is each function's environment as the template sets it with the
	// parameters' defaults (by short name: "fill", "sweep", ...): Globals
	// and the function's own Variables that are literals or a !Ref to a
	// parameter. Values the template computes (the database login, the
	// DLQ's URL) are left to the driver.
	Env map[string]map[string]string
	// VisibilityTimeout and MaxReceiveCount configure the report queue.
	VisibilityTimeout time.Duration
	MaxReceiveCount   int
	// BatchSize, BatchingWindow and MaxConcurrency configure compensate's
	// SQS mapping (MaxConcurrency from ScalingConfig, through its
	// parameter's default).
	BatchSize      int
	BatchingWindow time.Duration
	MaxConcurrency int
}

// ReadTemplate parses the SAM template at path. The intrinsic-function tags
// (!Ref, !GetAtt, ...) are kept as plain tagged nodes, so yaml.v3 reads the
// file without knowing CloudFormation.
func ReadTemplate(path string) (Template, error) {
	body, err := os.ReadFile(path)
	if err != nil {
		return Template{}, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(body, &doc); err != nil {
		return Template{}, fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return Template{}, fmt.Errorf("%s: empty document", path)
	}
	root := doc.Content[0]
	r := tmplReader{root: root, path: path}
	fill := []string{"Resources", "FillFunction", "Properties"}
	relay := []string{"Resources", "RelayFunction", "Properties"}
	t := Template{
		FunctionTimeout:   r.seconds("Globals", "Function", "Timeout"),
		FillTimeout:       r.seconds(append(fill, "Timeout")...),
		FunctionMemory:    r.integer("Globals", "Function", "MemorySize"),
		FillMemory:        r.integer(append(fill, "MemorySize")...),
		FillSchedule:      r.rate(append(fill, "Events", "EveryMinute", "Properties", "ScheduleExpression")...),
		SweepSchedule:     r.rate("Resources", "SweepFunction", "Properties", "Events", "EveryMinute", "Properties", "ScheduleExpression"),
		FillConcurrency:   r.integer(append(fill, "ReservedConcurrentExecutions")...),
		FillInput:         []byte(r.scalar("Resources", "FillFunction", "Properties", "Events", "EveryMinute", "Properties", "Input")),
		SweepInput:        []byte(r.scalar("Resources", "SweepFunction", "Properties", "Events", "EveryMinute", "Properties", "Input")),
		PruneSchedule:     r.rate("Resources", "PruneFunction", "Properties", "Events", "EveryHour", "Properties", "ScheduleExpression"),
		PruneInput:        []byte(r.scalar("Resources", "PruneFunction", "Properties", "Events", "EveryHour", "Properties", "Input")),
		VisibilityTimeout: r.seconds("Resources", "RollbackReportQueue", "Properties", "VisibilityTimeout"),
		MaxReceiveCount:   r.integer("Resources", "RollbackReportQueue", "Properties", "RedrivePolicy", "maxReceiveCount"),
		BatchSize:         r.integer("Resources", "CompensateFunction", "Properties", "Events", "RollbackReports", "Properties", "BatchSize"),
		BatchingWindow:    r.seconds("Resources", "CompensateFunction", "Properties", "Events", "RollbackReports", "Properties", "MaximumBatchingWindowInSeconds"),
		MaxConcurrency:    r.integer("Resources", "CompensateFunction", "Properties", "Events", "RollbackReports", "Properties", "ScalingConfig", "MaximumConcurrency"),
		RelaySchedule:     r.rate(append(relay, "Events", "EveryMinute", "Properties", "ScheduleExpression")...),
		RelayInput:        []byte(r.scalar(append(relay, "Events", "EveryMinute", "Properties", "Input")...)),
		RelayTimeout:      r.seconds(append(relay, "Timeout")...),
		RelayMemory:       r.integer(append(relay, "MemorySize")...),
		RelayConcurrency:  r.integer(append(relay, "ReservedConcurrentExecutions")...),
	}
	t.Env = map[string]map[string]string{}
	for _, fn := range append(slices.Clone(Functions), Relay) {
		vars := map[string]string{}
		r.variables(vars, "Globals", "Function", "Environment", "Variables")
		r.variables(vars, "Resources", logicalID(fn), "Properties", "Environment", "Variables")
		t.Env[fn] = vars
	}
	return t, r.err
}

// logicalID is the template's name for a function: fill -> FillFunction.
func logicalID(fn string) string { return strings.ToUpper(fn[:1]) + fn[1:] + "Function" }

// variables adds the plain and parameter-default values of the mapping at
// keys to vars.
func (r *tmplReader) variables(vars map[string]string, keys ...string) {
	n := r.root
	for _, k := range keys {
		if n = child(n, k); n == nil {
			return
		}
	}
	if n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		name, v := n.Content[i].Value, n.Content[i+1]
		switch {
		case v.Kind != yaml.ScalarNode:
		case v.Tag == "!Ref":
			if def := child(child(child(r.root, "Parameters"), v.Value), "Default"); def != nil && def.Kind == yaml.ScalarNode {
				vars[name] = def.Value
			}
		case !strings.HasPrefix(v.Tag, "!") || strings.HasPrefix(v.Tag, "!!"):
			vars[name] = v.Value
		}
	}
}

// tmplReader keeps the first error, so ReadTemplate reads like a literal.
type tmplReader struct {
	root *yaml.Node
	path string
	err  error
}

func (r *tmplReader) scalar(keys ...string) string {
	if r.err != nil {
		return ""
	}
	n := r.root
	for _, k := range keys {
		n = child(n, k)
		if n == nil {
			r.err = fmt.Errorf("%s: no %v", r.path, keys)
			return ""
		}
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!Ref" {
		// A parameter: what a deployment that keeps the default gets.
		def := child(child(child(r.root, "Parameters"), n.Value), "Default")
		if def == nil {
			r.err = fmt.Errorf("%s: %v refers to %s, which has no Default", r.path, keys, n.Value)
			return ""
		}
		n = def
	}
	// Another intrinsic (!Sub, !If, ...) is not a value the driver can use.
	if n.Kind != yaml.ScalarNode || strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
		r.err = fmt.Errorf("%s: %v is not a plain value", r.path, keys)
		return ""
	}
	return n.Value
}

func (r *tmplReader) integer(keys ...string) int {
	s := r.scalar(keys...)
	if r.err != nil {
		return 0
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		r.err = fmt.Errorf("%s: %v: %w", r.path, keys, err)
	}
	return v
}

func (r *tmplReader) seconds(keys ...string) time.Duration {
	return time.Duration(r.integer(keys...)) * time.Second
}

func (r *tmplReader) rate(keys ...string) time.Duration {
	s := r.scalar(keys...)
	if r.err != nil {
		return 0
	}
	d, err := ParseRate(s)
	if err != nil {
		r.err = fmt.Errorf("%s: %v: %w", r.path, keys, err)
	}
	return d
}

// ParseRate reads an EventBridge rate expression, "rate(1 minute)" or
// "rate(5 hours)", as the period it fires with. Cron expressions are not
// rates and are refused.
func ParseRate(expr string) (time.Duration, error) {
	inner, hasPrefix := strings.CutPrefix(strings.TrimSpace(expr), "rate(")
	inner, hasSuffix := strings.CutSuffix(inner, ")")
	if !hasPrefix || !hasSuffix {
		return 0, fmt.Errorf("schedule %q is not a rate(...) expression", expr)
	}
	fields := strings.Fields(inner)
	if len(fields) != 2 {
		return 0, fmt.Errorf("schedule %q: want rate(<n> <unit>)", expr)
	}
	n, err := strconv.Atoi(fields[0])
	if err != nil || n < 1 {
		return 0, fmt.Errorf("schedule %q: %q is not a positive whole number", expr, fields[0])
	}
	unit := map[string]time.Duration{
		"minute": time.Minute, "minutes": time.Minute,
		"hour": time.Hour, "hours": time.Hour,
		"day": 24 * time.Hour, "days": 24 * time.Hour,
	}[fields[1]]
	if unit == 0 {
		return 0, fmt.Errorf("schedule %q: unknown unit %q", expr, fields[1])
	}
	return time.Duration(n) * unit, nil
}

// child returns the value of key in a mapping node, or nil.
func child(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
