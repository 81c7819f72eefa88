package local

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Template is what the local driver copies from template.yaml, so the
// emulation cannot drift from what AWS would run: the schedules' Input, the
// function timeout, and the queue and event source mapping settings.
type Template struct {
	// FunctionTimeout is Globals.Function.Timeout.
	FunctionTimeout time.Duration
	// FillInput and SweepInput are the ScheduleV2 events' Input.
	FillInput, SweepInput []byte
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
	t := Template{
		FunctionTimeout:   r.seconds("Globals", "Function", "Timeout"),
		FillInput:         []byte(r.scalar("Resources", "FillFunction", "Properties", "Events", "EveryMinute", "Properties", "Input")),
		SweepInput:        []byte(r.scalar("Resources", "SweepFunction", "Properties", "Events", "EveryMinute", "Properties", "Input")),
		VisibilityTimeout: r.seconds("Resources", "RollbackReportQueue", "Properties", "VisibilityTimeout"),
		MaxReceiveCount:   r.integer("Resources", "RollbackReportQueue", "Properties", "RedrivePolicy", "maxReceiveCount"),
		BatchSize:         r.integer("Resources", "CompensateFunction", "Properties", "Events", "RollbackReports", "Properties", "BatchSize"),
		BatchingWindow:    r.seconds("Resources", "CompensateFunction", "Properties", "Events", "RollbackReports", "Properties", "MaximumBatchingWindowInSeconds"),
		MaxConcurrency:    r.integer("Resources", "CompensateFunction", "Properties", "Events", "RollbackReports", "Properties", "ScalingConfig", "MaximumConcurrency"),
	}
	return t, r.err
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
