package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
)

// The dashboard and the alarms are checked against the metrics the code
// emits, as the roles are against the SQS calls it makes: a widget or an
// alarm on a metric no function emits, or without the dimensions the code
// puts on it, shows a flat line or never fires, and nothing on AWS says so.

const metricsImport = "github.com/outboxkeeper/outboxkeeper/internal/metrics"

// emitted is what the code's EMF lines carry: for each function, the
// names of the metrics its packages build, and the dimension set every
// line has.
type emitted struct {
	names      map[string][]string // function -> metric names
	dimensions []string
	namespace  string
}

// codeMetrics finds, for each function, every metric name its module
// packages put in a metrics.Metric (a metrics.Metric{Name: "..."} literal,
// or an element of a []metrics.Metric literal), in non-test files; and the
// dimensions and namespace of a line internal/metrics really writes.
func codeMetrics(t *testing.T) emitted {
	t.Helper()
	e := emitted{names: map[string][]string{}}
	for _, fn := range []string{"fill", "sweep", "compensate", "prune", "deliver", "relay"} {
		seen := map[string]bool{}
		for _, file := range moduleFiles(t, "../../functions/"+fn) {
			for _, name := range metricNames(t, file) {
				seen[name] = true
			}
		}
		for name := range seen {
			e.names[fn] = append(e.names[fn], name)
		}
		sort.Strings(e.names[fn])
	}
	var line bytes.Buffer
	if err := (&metrics.Emitter{Function: "fill", Stack: "s", Out: &line}).Emit(metrics.Metric{Name: "Lag", Unit: metrics.Count}); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		AWS struct {
			CloudWatchMetrics []struct {
				Namespace  string
				Dimensions [][]string
			}
		} `json:"_aws"`
	}
	if err := json.Unmarshal(line.Bytes(), &doc); err != nil || len(doc.AWS.CloudWatchMetrics) != 1 || len(doc.AWS.CloudWatchMetrics[0].Dimensions) != 1 {
		t.Fatalf("internal/metrics writes %s (%v): want one directive with one dimension set", line.String(), err)
	}
	e.namespace = doc.AWS.CloudWatchMetrics[0].Namespace
	e.dimensions = doc.AWS.CloudWatchMetrics[0].Dimensions[0]
	return e
}

// moduleFiles lists the non-test Go files of this module's packages that
// the package at dir depends on (itself included).
func moduleFiles(t *testing.T, dir string) []string {
	t.Helper()
	listing, err := exec.Command("go", "list", "-deps", "-f", `{{if not .Standard}}{{.ImportPath}}|{{.Dir}}|{{join .GoFiles ","}}{{end}}`, dir).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", dir, err)
	}
	var files []string
	for _, line := range strings.Split(strings.TrimSpace(string(listing)), "\n") {
		parts := strings.Split(line, "|")
		if len(parts) != 3 || !strings.HasPrefix(parts[0], "github.com/outboxkeeper/outboxkeeper/") || parts[2] == "" {
			continue
		}
		for _, name := range strings.Split(parts[2], ",") {
			files = append(files, filepath.Join(parts[1], name))
		}
	}
	return files
}

func metricNames(t *testing.T, path string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	alias := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == metricsImport {
			alias = "metrics"
			if imp.Name != nil {
				alias = imp.Name.Name
			}
		}
	}
	if alias == "" {
		return nil
	}
	isMetric := func(e ast.Expr) bool {
		sel, ok := e.(*ast.SelectorExpr)
		id, _ := func() (*ast.Ident, bool) {
			if !ok {
				return nil, false
			}
			i, ok := sel.X.(*ast.Ident)
			return i, ok
		}()
		return ok && id != nil && id.Name == alias && sel.Sel.Name == "Metric"
	}
	var names []string
	name := func(lit *ast.CompositeLit) {
		for _, el := range lit.Elts {
			if kv, ok := el.(*ast.KeyValueExpr); ok {
				if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Name" {
					if v, ok := kv.Value.(*ast.BasicLit); ok && v.Kind == token.STRING {
						s, _ := strconv.Unquote(v.Value)
						names = append(names, s)
					}
				}
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		switch typ := lit.Type.(type) {
		case *ast.SelectorExpr:
			if isMetric(typ) {
				name(lit)
			}
		case *ast.ArrayType:
			if isMetric(typ.Elt) {
				for _, el := range lit.Elts {
					if inner, ok := el.(*ast.CompositeLit); ok && inner.Type == nil {
						name(inner)
					}
				}
			}
		}
		return true
	})
	return names
}

// stackToken stands for ${AWS::StackName} in a rendered dashboard body, so
// the check can tell it from a literal stack name.
const stackToken = "@stack@"

// relayFunction is the Function dimension a relay's metrics carry
// (relay:<RELAY_NAME>) as the template must select it: from the RelayName
// parameter, in the dashboard's body and in the alarms alike.
const relayFunction = "relay:@RelayName@"

// emitter is the function whose code emits a Function dimension's metrics:
// a relay's is the relay function's, whatever its name.
func emitter(function string) string {
	if strings.HasPrefix(function, "relay:") {
		return "relay"
	}
	return function
}

var subRef = regexp.MustCompile(`\$\{([^}!]+)\}`)

// dashboardBody renders the Dashboard's !Sub body as JSON: the stack name
// as stackToken, parameters as their defaults, any other reference (a
// function, a queue's name, an alarm's ARN) as its own name.
func dashboardBody(tpl *template) (map[string]any, error) {
	body, ok := get(tpl.Resources["Dashboard"], "Properties", "DashboardBody", "Fn::Sub").(string)
	if !ok {
		return nil, fmt.Errorf("Dashboard: DashboardBody is not a !Sub string")
	}
	e := tpl.evaluator(scenarios[0])
	rendered := subRef.ReplaceAllStringFunc(body, func(m string) string {
		name := subRef.FindStringSubmatch(m)[1]
		switch {
		case name == "AWS::StackName":
			return stackToken
		case name == "RelayName":
			return "@RelayName@"
		case e.params[name] != "":
			return e.params[name]
		}
		return name
	})
	var doc map[string]any
	if err := json.Unmarshal([]byte(rendered), &doc); err != nil {
		return nil, fmt.Errorf("Dashboard: DashboardBody is not JSON: %v", err)
	}
	return doc, nil
}

// widgetMetric is one metric of a widget: namespace, name and dimensions.
type widgetMetric struct {
	widget     string
	namespace  string
	name       string
	dimensions map[string]string
	order      []string
}

func dashboardMetrics(doc map[string]any) ([]widgetMetric, []string) {
	var out []widgetMetric
	var problems []string
	widgets, _ := doc["widgets"].([]any)
	for i, w := range widgets {
		if get(w, "type") != "metric" {
			continue
		}
		title, _ := get(w, "properties", "title").(string)
		where := fmt.Sprintf("widget %d (%s)", i, title)
		if get(w, "properties", "region") == nil {
			problems = append(problems, where+": no region")
		}
		ms, _ := get(w, "properties", "metrics").([]any)
		for _, m := range ms {
			parts, _ := m.([]any)
			var strs []string
			for _, p := range parts {
				if s, ok := p.(string); ok {
					strs = append(strs, s)
				}
			}
			if len(strs) < 2 || len(strs)%2 != 0 {
				problems = append(problems, fmt.Sprintf("%s: metric %v is not [namespace, name, dimension, value, ...]", where, m))
				continue
			}
			wm := widgetMetric{widget: where, namespace: strs[0], name: strs[1], dimensions: map[string]string{}}
			for j := 2; j < len(strs); j += 2 {
				wm.dimensions[strs[j]] = strs[j+1]
				wm.order = append(wm.order, strs[j])
			}
			out = append(out, wm)
		}
	}
	return out, problems
}

// checkCustomMetric: a metric in the code's namespace names one its
// function emits, with exactly the code's dimensions, the Stack one being
// this stack's.
func checkCustomMetric(e emitted, where, name string, dims map[string]string, stackIsOurs bool) []string {
	var problems []string
	fn := emitter(dims[metrics.DimensionFunction])
	if fn == "relay" && dims[metrics.DimensionFunction] != relayFunction {
		problems = append(problems, fmt.Sprintf("%s: %s with Function=%q, want relay:${RelayName}, the deployed relay's name", where, name, dims[metrics.DimensionFunction]))
	}
	if !slices.Contains(e.names[fn], name) {
		problems = append(problems, fmt.Sprintf("%s: %s with Function=%q, which the %s function's code does not emit (it emits %v)", where, name, fn, fn, e.names[fn]))
	}
	var keys []string
	for k := range dims {
		keys = append(keys, k)
	}
	if !slices.Equal(slices.Sorted(slices.Values(keys)), slices.Sorted(slices.Values(e.dimensions))) {
		problems = append(problems, fmt.Sprintf("%s: %s has dimensions %v, the code emits %v", where, name, keys, e.dimensions))
	}
	if !stackIsOurs {
		problems = append(problems, fmt.Sprintf("%s: %s is not selected by this stack's name (Stack = AWS::StackName)", where, name))
	}
	return problems
}

// dashboardMust is what the dashboard shows, at least: namespace, metric,
// and the dimension that picks it.
var dashboardMust = []struct{ namespace, name, dimension, value string }{
	{"Outboxkeeper", "Lag", "Function", "fill"},
	{"Outboxkeeper", "StallAgeSeconds", "Function", "fill"},
	{"Outboxkeeper", "ProofBlockedSeconds", "Function", "fill"},
	{"Outboxkeeper", "Filled", "Function", "fill"},
	{"Outboxkeeper", "Filled", "Function", "compensate"},
	{"Outboxkeeper", "OperatorFilled", "Function", "fill"},
	{"Outboxkeeper", "Redeliveries", "Function", "sweep"},
	{"Outboxkeeper", "DeadLettered", "Function", "sweep"},
	{"Outboxkeeper", "PassDurationMs", "Function", "fill"},
	{"Outboxkeeper", "RelayLag", "Function", relayFunction},
	{"Outboxkeeper", "RelaySent", "Function", relayFunction},
	{"Outboxkeeper", "RelayParked", "Function", relayFunction},
	{"Outboxkeeper", "RelayRuns", "Function", relayFunction},
	{"Outboxkeeper", "RelayBatchMs", "Function", relayFunction},
	{"AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", "RollbackReportQueue.QueueName"},
	{"AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName", "RollbackReportQueue.QueueName"},
	{"AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", "RollbackReportDLQ.QueueName"},
	{"AWS/Lambda", "Errors", "FunctionName", "FillFunction"},
	{"AWS/Lambda", "Errors", "FunctionName", "SweepFunction"},
	{"AWS/Lambda", "Errors", "FunctionName", "CompensateFunction"},
	{"AWS/Lambda", "Errors", "FunctionName", "PruneFunction"},
	{"AWS/Lambda", "Throttles", "FunctionName", "FillFunction"},
	{"AWS/Lambda", "Throttles", "FunctionName", "CompensateFunction"},
	{"Outboxkeeper", "Delivered", "Function", "deliver"},
	{"Outboxkeeper", "PushFailed", "Function", "deliver"},
	{"Outboxkeeper", "DeadUnknownRecipient", "Function", "deliver"},
	{"Outboxkeeper", "DeadRecipientDisabled", "Function", "deliver"},
	{"Outboxkeeper", "DeadGone", "Function", "deliver"},
	{"Outboxkeeper", "DeliverOldestPendingAge", "Function", "deliver"},
	{"AWS/Lambda", "Errors", "FunctionName", "DeliverFunction"},
}

// checkDashboard: every custom metric of every widget is one the code
// emits, with its dimensions and this stack's name; Lambda and SQS
// metrics name this stack's functions and queues; and the dashboard shows
// what on-call looks at.
func checkDashboard(tpl *template, e emitted) []string {
	doc, err := dashboardBody(tpl)
	if err != nil {
		return []string{err.Error()}
	}
	ms, problems := dashboardMetrics(doc)
	for _, m := range ms {
		switch m.namespace {
		case e.namespace:
			problems = append(problems, checkCustomMetric(e, "dashboard "+m.widget, m.name, m.dimensions, m.dimensions[metrics.DimensionStack] == stackToken)...)
		case "AWS/Lambda":
			if fn := m.dimensions["FunctionName"]; get(tpl.Resources[fn], "Type") != "AWS::Serverless::Function" {
				problems = append(problems, fmt.Sprintf("dashboard %s: %s of %q, which is not a function of this stack", m.widget, m.name, fn))
			}
		case "AWS/SQS":
			if q, _, _ := strings.Cut(m.dimensions["QueueName"], "."); get(tpl.Resources[q], "Type") != "AWS::SQS::Queue" {
				problems = append(problems, fmt.Sprintf("dashboard %s: %s of %q, which is not a queue of this stack", m.widget, m.name, m.dimensions["QueueName"]))
			}
		default:
			problems = append(problems, fmt.Sprintf("dashboard %s: namespace %q", m.widget, m.namespace))
		}
	}
	for _, want := range dashboardMust {
		if !slices.ContainsFunc(ms, func(m widgetMetric) bool {
			return m.namespace == want.namespace && m.name == want.name && m.dimensions[want.dimension] == want.value
		}) {
			problems = append(problems, fmt.Sprintf("dashboard: no widget shows %s %s for %s=%s", want.namespace, want.name, want.dimension, want.value))
		}
	}
	return problems
}

// checkAlarms: every alarm on the code's metrics names one its function
// emits, with the code's dimensions and Stack = AWS::StackName; and each
// scheduled pass has an alarm on its silence, which treats missing data as
// breaching.
func checkAlarms(tpl *template, e emitted) []string {
	var problems []string
	silent := map[string]bool{}
	for id, r := range tpl.Resources {
		if get(r, "Type") != "AWS::CloudWatch::Alarm" || get(r, "Properties", "Namespace") != e.namespace {
			continue
		}
		props := get(r, "Properties")
		name, _ := get(props, "MetricName").(string)
		dims := map[string]string{}
		stackIsOurs := false
		list, _ := get(props, "Dimensions").([]any)
		for _, d := range list {
			k, _ := get(d, "Name").(string)
			switch v := get(d, "Value").(type) {
			case string:
				dims[k] = v
			case map[string]any:
				if k == metrics.DimensionFunction && v["Fn::Sub"] != nil {
					dims[k] = strings.ReplaceAll(fmt.Sprint(v["Fn::Sub"]), "${RelayName}", "@RelayName@")
					break
				}
				dims[k] = fmt.Sprint(v)
				if k == metrics.DimensionStack && reflect.DeepEqual(v, map[string]any{"Ref": "AWS::StackName"}) {
					stackIsOurs = true
				}
			default:
				dims[k] = fmt.Sprint(v)
				if k == metrics.DimensionStack && reflect.DeepEqual(v, map[string]any{"Ref": "AWS::StackName"}) {
					stackIsOurs = true
				}
			}
		}
		problems = append(problems, checkCustomMetric(e, id, name, dims, stackIsOurs)...)
		if get(props, "TreatMissingData") == "breaching" && get(props, "ComparisonOperator") == "LessThanThreshold" {
			silent[emitter(dims[metrics.DimensionFunction])] = true
		}
	}
	for _, fn := range []string{"fill", "sweep", "prune", "deliver", "relay"} {
		if !silent[fn] {
			problems = append(problems, fmt.Sprintf("no alarm fires when the %s function stops running (an alarm on one of its per-pass metrics, LessThanThreshold, TreatMissingData breaching)", fn))
		}
	}
	return problems
}

// checkOperatorPolicy: the policy for people allows exactly the SQS calls
// the CLI makes, on the two report queues only.
func checkOperatorPolicy(tpl *template, calls []string) []string {
	var problems []string
	var granted []string
	statements, _ := get(tpl.Resources["OperatorPolicy"], "Properties", "PolicyDocument", "Statement").([]any)
	for _, st := range statements {
		if cond, _ := get(st, "Fn::If").([]any); len(cond) == 3 && cond[0] == "HasQueueKmsKey" {
			continue // the queue key's use, checked by checkKnobs
		}
		res := get(st, "Resource")
		if !reflect.DeepEqual(res, map[string]any{"Fn::GetAtt": []any{"RollbackReportQueue", "Arn"}}) &&
			!reflect.DeepEqual(res, map[string]any{"Fn::GetAtt": []any{"RollbackReportDLQ", "Arn"}}) {
			problems = append(problems, fmt.Sprintf("OperatorPolicy: a statement on %v, want one of the report queues", res))
		}
		granted = append(granted, statementActions(st)...)
	}
	for _, c := range calls {
		if !slices.Contains(granted, c) {
			problems = append(problems, fmt.Sprintf("OperatorPolicy: the CLI calls %s, which the policy does not allow", c))
		}
	}
	for _, g := range granted {
		if !slices.Contains(calls, g) {
			problems = append(problems, fmt.Sprintf("OperatorPolicy: allows %s, which the CLI never calls", g))
		}
	}
	return problems
}

// cliSQSCalls are the SQS operations cmd/outboxkeeper's code calls.
func cliSQSCalls(t *testing.T) []string {
	t.Helper()
	return sqsCallsIn(t, "../../cmd/outboxkeeper")
}

func TestCodeMetricsAreFound(t *testing.T) {
	e := codeMetrics(t)
	for fn, want := range map[string][]string{
		"fill":       {"Lag", "OperatorFilled", "PassDurationMs", "ProofBlockedSeconds"},
		"sweep":      {"DeadLettered", "OldestOpenAgeSeconds", "SweepRuns"},
		"compensate": {"DurationMs", "Filled", "Invalid"},
		"prune":      {"PassDurationMs", "PruneRuns"},
		"relay":      {"RelayBatchMs", "RelayLag", "RelayParked", "RelayRuns", "RelaySent", "RelayStopped"},
	} {
		for _, name := range want {
			if !slices.Contains(e.names[fn], name) {
				t.Errorf("%s: %s not found in its code's metrics %v", fn, name, e.names[fn])
			}
		}
	}
	if slices.Contains(e.names["sweep"], "Lag") {
		t.Errorf("sweep: Lag found, but only the fill emits it: %v", e.names["sweep"])
	}
	if !slices.Equal(e.dimensions, []string{metrics.DimensionStack, metrics.DimensionFunction}) {
		t.Errorf("dimensions = %v, want Stack and Function", e.dimensions)
	}
}
