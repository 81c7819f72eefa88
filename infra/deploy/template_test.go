// Package deploy holds the deployment checks: structural assertions on
// template.yaml that cfn-lint cannot know (they depend on this project's
// Makefile and configuration code). infra/deploy/check.sh runs cfn-lint and
// `sam build`.
package deploy

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/outboxkeeper/outboxkeeper/infra/local"
	"github.com/outboxkeeper/outboxkeeper/shared/config"
	"github.com/outboxkeeper/outboxkeeper/shared/deliver"
	"github.com/outboxkeeper/outboxkeeper/shared/fill"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
	"github.com/outboxkeeper/outboxkeeper/shared/relay"
)

const (
	templatePath = "../../template.yaml"
	makefilePath = "../../Makefile"
)

// --- Reading CloudFormation YAML ---------------------------------------------

// decode turns a YAML node into plain Go values, rewriting the short-form
// tags (!Ref, !Sub, !GetAtt, ...) into their long form ({"Ref": x},
// {"Fn::Sub": x}, ...) so the checks see one shape whichever form is used.
func decode(n *yaml.Node) (any, error) {
	if n.Kind == yaml.DocumentNode {
		return decode(n.Content[0])
	}
	if n.Kind == yaml.AliasNode {
		return decode(n.Alias)
	}
	var v any
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i < len(n.Content); i += 2 {
			val, err := decode(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			m[n.Content[i].Value] = val
		}
		v = m
	case yaml.SequenceNode:
		l := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			val, err := decode(c)
			if err != nil {
				return nil, err
			}
			l = append(l, val)
		}
		v = l
	case yaml.ScalarNode:
		// Keep scalars as the strings CloudFormation hands to Lambda (an
		// environment value 1000 is the string "1000").
		v = n.Value
	}
	if !strings.HasPrefix(n.Tag, "!") || strings.HasPrefix(n.Tag, "!!") {
		return v, nil
	}
	fn := strings.TrimPrefix(n.Tag, "!")
	switch fn {
	case "Ref", "Condition":
		return map[string]any{fn: v}, nil
	case "GetAtt":
		if s, ok := v.(string); ok {
			// !GetAtt A.B is the list [A, B].
			res, attr, _ := strings.Cut(s, ".")
			v = []any{res, attr}
		}
	}
	return map[string]any{"Fn::" + fn: v}, nil
}

type template struct {
	Parameters map[string]any
	Conditions map[string]any
	Globals    map[string]any
	Resources  map[string]any
}

func loadTemplate(t *testing.T, text string) *template {
	t.Helper()
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(text), &root); err != nil {
		t.Fatalf("template.yaml: %v", err)
	}
	v, err := decode(&root)
	if err != nil {
		t.Fatal(err)
	}
	doc := v.(map[string]any)
	tpl := &template{}
	tpl.Parameters, _ = doc["Parameters"].(map[string]any)
	tpl.Conditions, _ = doc["Conditions"].(map[string]any)
	tpl.Globals, _ = doc["Globals"].(map[string]any)
	tpl.Resources, _ = doc["Resources"].(map[string]any)
	return tpl
}

func get(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func (tpl *template) functions() []string {
	var ids []string
	for id, r := range tpl.Resources {
		if get(r, "Type") == "AWS::Serverless::Function" {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// property reads a function property, falling back to Globals.Function as
// SAM does.
func (tpl *template) property(fn, name string) any {
	if v := get(tpl.Resources[fn], "Properties", name); v != nil {
		return v
	}
	return get(tpl.Globals, "Function", name)
}

func (tpl *template) events(fn, typ string) []map[string]any {
	var out []map[string]any
	evs, _ := get(tpl.Resources[fn], "Properties", "Events").(map[string]any)
	for _, e := range evs {
		if get(e, "Type") == typ {
			props, _ := get(e, "Properties").(map[string]any)
			out = append(out, props)
		}
	}
	return out
}

// --- Evaluating conditions and values for one set of parameter values --------

// scenario is one deployment: parameter values over the defaults.
type scenario struct {
	name   string
	params map[string]string
}

type evaluator struct {
	tpl    *template
	params map[string]string
}

func (tpl *template) evaluator(sc scenario) *evaluator {
	params := map[string]string{
		"AWS::Region":    "eu-west-1",
		"AWS::AccountId": "123456789012",
		"AWS::Partition": "aws",
		"AWS::StackName": "outboxkeeper",
	}
	for name, p := range tpl.Parameters {
		if d, ok := get(p, "Default").(string); ok {
			params[name] = d
		}
	}
	for k, v := range sc.params {
		params[k] = v
	}
	return &evaluator{tpl: tpl, params: params}
}

// exists says the resource is created in this scenario: it has no
// Condition, or its Condition holds.
func (e *evaluator) exists(id string) bool {
	c, ok := get(e.tpl.Resources[id], "Condition").(string)
	return !ok || e.condition(c)
}

func (e *evaluator) condition(name string) bool {
	c, ok := e.tpl.Conditions[name]
	if !ok {
		panic("unknown condition " + name)
	}
	return e.truth(c)
}

func (e *evaluator) truth(v any) bool {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		panic(fmt.Sprintf("not a condition: %v", v))
	}
	for fn, arg := range m {
		args, _ := arg.([]any)
		switch fn {
		case "Condition":
			return e.condition(arg.(string))
		case "Fn::Not":
			return !e.truth(args[0])
		case "Fn::And":
			for _, a := range args {
				if !e.truth(a) {
					return false
				}
			}
			return true
		case "Fn::Or":
			for _, a := range args {
				if e.truth(a) {
					return true
				}
			}
			return false
		case "Fn::Equals":
			return e.str(args[0]) == e.str(args[1])
		}
		panic("unsupported condition function " + fn)
	}
	return false
}

// noValue marks AWS::NoValue: the property or variable is left out.
type noValue struct{}

// value resolves Fn::If and AWS::NoValue, leaving other values as they are.
func (e *evaluator) value(v any) any {
	if m, ok := v.(map[string]any); ok && len(m) == 1 {
		if args, ok := m["Fn::If"].([]any); ok {
			if e.condition(args[0].(string)) {
				return e.value(args[1])
			}
			return e.value(args[2])
		}
		if m["Ref"] == "AWS::NoValue" {
			return noValue{}
		}
	}
	return v
}

var subVar = regexp.MustCompile(`\$\{([^}!]+)\}`)

// str renders a value as the string CloudFormation would produce. Resources
// stand for themselves: a queue's Ref is an SQS URL, anything else its ID.
func (e *evaluator) str(v any) string {
	v = e.value(v)
	switch x := v.(type) {
	case string:
		return x
	case map[string]any:
		if ref, ok := x["Ref"].(string); ok {
			return e.ref(ref)
		}
		if s, ok := x["Fn::Sub"].(string); ok {
			return subVar.ReplaceAllStringFunc(s, func(m string) string {
				return e.ref(subVar.FindStringSubmatch(m)[1])
			})
		}
		// The list form: the string, then variables of its own.
		if list, ok := x["Fn::Sub"].([]any); ok && len(list) == 2 {
			vars, _ := list[1].(map[string]any)
			return subVar.ReplaceAllStringFunc(list[0].(string), func(m string) string {
				name := subVar.FindStringSubmatch(m)[1]
				if v, ok := vars[name]; ok {
					return e.str(v)
				}
				return e.ref(name)
			})
		}
		if args, ok := x["Fn::Select"].([]any); ok {
			i, _ := strconv.Atoi(fmt.Sprint(args[0]))
			list := e.list(args[1])
			if i >= len(list) {
				panic(fmt.Sprintf("Fn::Select %d of %v: out of range (CloudFormation fails the deployment)", i, list))
			}
			return list[i]
		}
		if args, ok := x["Fn::Join"].([]any); ok {
			var parts []string
			switch list := e.value(args[1]).(type) {
			case []any:
				for _, p := range list {
					parts = append(parts, e.str(p))
				}
			default:
				parts = append(parts, e.str(list))
			}
			return strings.Join(parts, args[0].(string))
		}
	}
	panic(fmt.Sprintf("cannot render %v", v))
}

// list renders a list value: an Fn::Split, or a literal list.
func (e *evaluator) list(v any) []string {
	if m, ok := v.(map[string]any); ok {
		if args, ok := m["Fn::Split"].([]any); ok {
			return strings.Split(e.str(args[1]), args[0].(string))
		}
	}
	var out []string
	items, _ := v.([]any)
	for _, it := range items {
		out = append(out, e.str(it))
	}
	return out
}

func (e *evaluator) ref(name string) string {
	if v, ok := e.params[name]; ok {
		return v
	}
	if r, ok := e.tpl.Resources[name]; ok {
		switch get(r, "Type") {
		case "AWS::SQS::Queue":
			return "https://sqs.eu-west-1.amazonaws.com/123456789012/outboxkeeper-" + name
		case "AWS::SecretsManager::Secret":
			return "arn:aws:secretsmanager:eu-west-1:123456789012:secret:outboxkeeper-" + name + "-AbCdEf"
		}
		return name
	}
	panic("unknown reference " + name)
}

// environment is a function's effective variables: Globals merged with its
// own, as SAM merges them, with conditions resolved.
func (e *evaluator) environment(fn string) map[string]string {
	env := map[string]string{}
	for _, src := range []any{
		get(e.tpl.Globals, "Function", "Environment", "Variables"),
		get(e.tpl.Resources[fn], "Properties", "Environment", "Variables"),
	} {
		vars, _ := src.(map[string]any)
		for name, v := range vars {
			if _, skip := e.value(v).(noValue); skip {
				delete(env, name)
				continue
			}
			env[name] = e.str(v)
		}
	}
	return env
}

// --- The checks ------------------------------------------------------------
// Each returns the problems it finds, so the mutation test below can prove
// that it does find them.

// builtPackage is what a build target's recipe builds, as make -n prints it.
var builtPackage = regexp.MustCompile(`-o /artifacts/bootstrap (\S+)\s*$`)

// checkMakefileTargets: every function builds with BuildMethod makefile,
// and make build-<LogicalId>, as sam build runs it, builds the function's
// own package into ARTIFACTS_DIR (make -n on makefile: nothing runs).
func checkMakefileTargets(tpl *template, makefile string) []string {
	var problems []string
	for _, fn := range tpl.functions() {
		if get(tpl.Resources[fn], "Metadata", "BuildMethod") != "makefile" {
			problems = append(problems, fn+": Metadata.BuildMethod is not makefile")
		}
		cmd := exec.Command("make", "-n", "-s", "-f", "-", "build-"+fn, "ARTIFACTS_DIR=/artifacts")
		cmd.Stdin = strings.NewReader(makefile)
		out, err := cmd.CombinedOutput()
		switch m := builtPackage.FindSubmatch(out); {
		case err != nil && strings.Contains(string(out), "No rule to make target"):
			problems = append(problems, fn+": no build-"+fn+" target in the Makefile")
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s: make -n build-%s: %v\n%s", fn, fn, err, out))
		case m == nil || string(m[1]) != "./functions/"+shortName(fn):
			problems = append(problems, fmt.Sprintf("%s: build-%s does not build ./functions/%s into ARTIFACTS_DIR: %q", fn, fn, shortName(fn), out))
		}
	}
	return problems
}

func number(v any) (int, bool) {
	s, ok := v.(string)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// checkQueueConsumers: every SQS-triggered function reports partial batch
// failures, its queue's visibility timeout is at least six times the
// function's timeout (AWS's guidance for Lambda event sources), and it has
// no batching window: the window is whole seconds, so the smallest one
// alone would hold a report past its latency target.
func checkQueueConsumers(tpl *template) []string {
	var problems []string
	consumers := 0
	for _, fn := range tpl.functions() {
		for _, ev := range tpl.events(fn, "SQS") {
			consumers++
			if types, _ := ev["FunctionResponseTypes"].([]any); !slices.Contains(types, any("ReportBatchItemFailures")) {
				problems = append(problems, fn+": SQS event lacks FunctionResponseTypes ReportBatchItemFailures")
			}
			arn, _ := get(ev, "Queue", "Fn::GetAtt").([]any)
			if len(arn) != 2 || arn[1] != "Arn" {
				problems = append(problems, fn+": SQS event Queue is not !GetAtt <queue>.Arn")
				continue
			}
			queue := arn[0].(string)
			timeout, ok1 := number(tpl.property(fn, "Timeout"))
			visibility, ok2 := number(get(tpl.Resources[queue], "Properties", "VisibilityTimeout"))
			if !ok1 || !ok2 {
				problems = append(problems, fn+": Timeout or "+queue+".VisibilityTimeout is not a literal number")
				continue
			}
			if visibility < 6*timeout {
				problems = append(problems, fmt.Sprintf("%s: VisibilityTimeout %d < 6 x %s Timeout %d", queue, visibility, fn, timeout))
			}
			if window, _ := number(ev["MaximumBatchingWindowInSeconds"]); window != 0 {
				problems = append(problems, fmt.Sprintf("%s: MaximumBatchingWindowInSeconds %d: a lone report would wait that long for company, past the reported rollback's 0.5 s", fn, window))
			}
		}
	}
	if consumers == 0 {
		problems = append(problems, "no function has an SQS event (CompensateFunction should)")
	}
	return problems
}

// checkScheduled: a scheduled pass runs one at a time, except the watching
// ones (fill, deliver, relay), whose passes overlap for the moment of the
// hand-over.
func checkScheduled(tpl *template) []string {
	var problems []string
	scheduled := 0
	for _, fn := range tpl.functions() {
		if len(tpl.events(fn, "ScheduleV2"))+len(tpl.events(fn, "Schedule")) == 0 {
			continue
		}
		scheduled++
		want := 1
		if watching[fn] != "" {
			want = 2
		}
		if n, _ := number(tpl.property(fn, "ReservedConcurrentExecutions")); n != want {
			problems = append(problems, fmt.Sprintf("%s: scheduled, but ReservedConcurrentExecutions is not %d", fn, want))
		}
	}
	if scheduled < 2 {
		problems = append(problems, "fewer than two scheduled functions (FillFunction and SweepFunction should be)")
	}
	return problems
}

// watchSlack is how late an invocation may come without a moment going
// unwatched: a watching pass must outlast the schedule's period by this.
const watchSlack = 10 * time.Second

// watching are the functions whose passes watch, with the variable that
// turns watching on.
var watching = map[string]string{"FillFunction": "FILL_WATCH", "DeliverFunction": "DELIVER_WATCH", "RelayFunction": "RELAY_WATCH"}

// checkWatchCoverage: with the parameters' defaults, some pass of each
// watching function is watching at every moment the schedule is enabled.
func checkWatchCoverage(tpl *template) []string {
	var problems []string
	for _, fn := range slices.Sorted(maps.Keys(watching)) {
		problems = append(problems, checkWatchCoverageOf(tpl, fn)...)
	}
	return problems
}

// checkWatchCoverageOf: each pass of fn may run min(its pass budget,
// timeout - 2s), which must exceed the schedule's period with slack, and
// two may run at once for the hand-over.
func checkWatchCoverageOf(tpl *template, fn string) []string {
	e := tpl.evaluator(relayScenario)
	env := e.environment(fn)
	if env[watching[fn]] != "true" {
		return []string{fn + ": " + watching[fn] + " does not default to true"}
	}
	var budget time.Duration
	switch fn {
	case "FillFunction":
		cfg, err := config.Load[fill.Config](config.FromMap(env))
		if err != nil {
			return []string{fmt.Sprintf("%s: %v", fn, err)}
		}
		budget = cfg.PassBudget
	case "RelayFunction":
		cfg, err := config.Load[relay.Config](config.FromMap(env))
		if err != nil {
			return []string{fmt.Sprintf("%s: %v", fn, err)}
		}
		budget = cfg.PassBudget
	case "DeliverFunction":
		cfg, err := config.Load[deliver.Config](config.FromMap(env))
		if err != nil {
			return []string{fmt.Sprintf("%s: %v", fn, err)}
		}
		budget = cfg.PassBudget
	}
	timeout, ok := number(tpl.property(fn, "Timeout"))
	if !ok {
		return []string{fn + ": Timeout is not a literal number"}
	}
	evs := tpl.events(fn, "ScheduleV2")
	if len(evs) != 1 {
		return []string{fn + ": want exactly one ScheduleV2 event"}
	}
	expr, _ := evs[0]["ScheduleExpression"].(string)
	period, err := local.ParseRate(expr)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", fn, err)}
	}
	watch := min(budget, time.Duration(timeout)*time.Second-pass.Margin)
	var problems []string
	if watch < period+watchSlack {
		problems = append(problems, fmt.Sprintf("%s: a pass may watch %s, not the schedule's %s plus %s of slack: some minutes would go unwatched",
			fn, watch, period, watchSlack))
	}
	if n, _ := number(tpl.property(fn, "ReservedConcurrentExecutions")); n < 2 {
		problems = append(problems, fn+": the hand-over needs two concurrent executions")
	}
	return problems
}

// shortName maps a logical ID to the name config.Variables uses.
func shortName(fn string) string { return strings.ToLower(strings.TrimSuffix(fn, "Function")) }

// code is what the checks compare the template with, read from the code
// once: the SQS calls of each function and of the CLI, and the metrics
// the functions emit.
type code struct {
	calls    map[string][]string
	cliCalls []string
	metrics  emitted
}

func readCode(t *testing.T, tpl *template) code {
	t.Helper()
	return code{calls: sqsCalls(t, tpl.functions()), cliCalls: cliSQSCalls(t), metrics: codeMetrics(t)}
}

func allChecks(tpl *template, makefile string, c code) []string {
	calls := c.calls
	var p []string
	p = append(p, checkDashboard(tpl, c.metrics)...)
	p = append(p, checkAlarms(tpl, c.metrics)...)
	p = append(p, checkOperatorPolicy(tpl, c.cliCalls)...)
	p = append(p, checkSQSPermissions(tpl, calls)...)
	p = append(p, checkParameterPatterns(tpl)...)
	p = append(p, checkMakefileTargets(tpl, makefile)...)
	p = append(p, checkQueueConsumers(tpl)...)
	p = append(p, checkScheduled(tpl)...)
	p = append(p, checkWatchCoverage(tpl)...)
	p = append(p, checkEnvironment(tpl)...)
	p = append(p, checkMigrations(tpl)...)
	p = append(p, checkRoles(tpl)...)
	p = append(p, checkBounds(tpl)...)
	p = append(p, checkRelayTarget(tpl)...)
	return p
}

// --- Tests -------------------------------------------------------------------

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.FromSlash(path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTemplatePassesEveryCheck runs each check of allChecks on the real
// template and Makefile.
func TestTemplatePassesEveryCheck(t *testing.T) {
	tpl := loadTemplate(t, read(t, templatePath))
	makefile := read(t, makefilePath)
	c := readCode(t, tpl)
	if got, want := tpl.functions(), []string{"CompensateFunction", "DeliverFunction", "FillFunction", "MigrateFunction", "PruneFunction", "RelayFunction", "SweepFunction"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("functions = %v, want %v", got, want)
	}
	for name, problems := range map[string][]string{
		"makefile targets": checkMakefileTargets(tpl, makefile),
		"queue consumers":  checkQueueConsumers(tpl),
		"scheduled":        checkScheduled(tpl),
		"watch coverage":   checkWatchCoverage(tpl),
		"environment":      checkEnvironment(tpl),
		"sqs permissions":  checkSQSPermissions(tpl, c.calls),
		"dashboard":        checkDashboard(tpl, c.metrics),
		"alarms":           checkAlarms(tpl, c.metrics),
		"operator policy":  checkOperatorPolicy(tpl, c.cliCalls),
		"patterns":         checkParameterPatterns(tpl),
		"migrations":       checkMigrations(tpl),
		"roles":            checkRoles(tpl),
		"bounds":           checkBounds(tpl),
		"relay target":     checkRelayTarget(tpl),
	} {
		for _, p := range problems {
			t.Errorf("%s: %s", name, p)
		}
	}
}

// TestChecksCatchBreakage breaks the template (or the Makefile) in one way
// at a time and expects the checks to notice, so a check that silently
// passes everything cannot go unnoticed.
func TestChecksCatchBreakage(t *testing.T) {
	text, makefile := read(t, templatePath), read(t, makefilePath)
	fromCode := readCode(t, loadTemplate(t, text))
	cases := []struct {
		name          string
		old, new      string
		breakMakefile bool
		want          string
	}{
		{name: "missing make target", old: "FUNCTIONS := Fill Sweep Compensate", new: "FUNCTIONS := Fill Compensate", breakMakefile: true,
			want: "no build-SweepFunction target"},
		{name: "make target builds another package", old: "tr A-Z a-z", new: "tr a-z A-Z", breakMakefile: true,
			want: "FillFunction: build-FillFunction does not build ./functions/fill"},
		{name: "visibility below 6x timeout", old: "VisibilityTimeout: 180", new: "VisibilityTimeout: 179",
			want: "VisibilityTimeout 179 < 6 x CompensateFunction Timeout 30"},
		{name: "global timeout raised", old: "    Timeout: 30\n", new: "    Timeout: 31\n",
			want: "< 6 x CompensateFunction Timeout 31"},
		{name: "a batching window", old: "MaximumBatchingWindowInSeconds: 0", new: "MaximumBatchingWindowInSeconds: 1",
			want: "CompensateFunction: MaximumBatchingWindowInSeconds 1"},
		{name: "no partial batch response", old: "FunctionResponseTypes: [ReportBatchItemFailures]", new: "FunctionResponseTypes: []",
			want: "lacks FunctionResponseTypes"},
		{name: "scheduled without reserved concurrency",
			old: "      # Concurrent sweeps would be correct (compare-and-set, SKIP LOCKED) but\n      # only double the load.\n      ReservedConcurrentExecutions: 1\n", new: "",
			want: "SweepFunction: scheduled, but ReservedConcurrentExecutions is not 1"},
		{name: "fill without the hand-over's concurrency", old: "      ReservedConcurrentExecutions: 2\n", new: "      ReservedConcurrentExecutions: 1\n",
			want: "FillFunction: the hand-over needs two concurrent executions"},
		{name: "fill budget within the schedule's period", old: "    Default: 85s\n", new: "    Default: 55s\n",
			want: "some minutes would go unwatched"},
		{name: "fill timeout cuts the watch short", old: "      Timeout: 90\n", new: "      Timeout: 60\n",
			want: "some minutes would go unwatched"},
		{name: "variable no function reads", old: "FILL_GRACE: !Ref FillGrace", new: "FILL_GRACE: !Ref FillGrace\n          FILL_TYPO: x",
			want: "sets FILL_TYPO"},
		{name: "variable for another function", old: "SWEEP_PASS_BUDGET: !Ref SweepPassBudget", new: "SWEEP_PASS_BUDGET: !Ref SweepPassBudget\n          FILL_GRACE: 2s",
			want: "SweepFunction (secret): sets FILL_GRACE"},
		{name: "secret not passed", old: "DATABASE_SECRET_ARN: !If [UseSecret, !Ref DatabaseSecretArn, !Ref AWS::NoValue]", new: "",
			want: "the migrate function must log in with the owner's secret"},
		{name: "no secret for the functions", old: "        DATABASE_SECRET_ARN: !If\n          - GeneratedMaintainer\n          - !Ref MaintainerSecret\n          - !If [UseSecret, !Ref DatabaseSecretArn, !Ref AWS::NoValue]\n", new: "",
			want: "FillFunction (secret): want DATABASE_SECRET_ARN"},
		{name: "functions given the owner's secret", old: "          - !Ref MaintainerSecret\n          - !If [UseSecret, !Ref DatabaseSecretArn, !Ref AWS::NoValue]",
			new:  "          - !Ref DatabaseSecretArn\n          - !If [UseSecret, !Ref DatabaseSecretArn, !Ref AWS::NoValue]",
			want: "FillFunction (secret): logs in with the owner's secret"},
		{name: "functions given the owner's IAM user", old: "                - IamMaintainer\n                - !If [HasMaintainerUser, !Ref MaintainerUser, !Sub \"${OutboxSchema}_maintainer\"]\n                - !Ref DatabaseUser",
			new:  "                - IamMaintainer\n                - !Ref DatabaseUser\n                - !Ref DatabaseUser",
			want: "FillFunction (iam): logs in as the owner DatabaseUser"},
		{name: "IAM flag not passed", old: `DATABASE_IAM_AUTH: !If [UseIamAuth, "true", !Ref AWS::NoValue]`, new: "",
			want: "want DATABASE_URL, DATABASE_IAM_AUTH=true"},
		{name: "IAM URL without TLS", old: "${DatabaseName}?sslmode=require\"\n            - User:", new: "${DatabaseName}\"\n            - User:",
			want: "must require TLS"},
		{name: "DLQ URL not passed", old: "COMPENSATE_DLQ_URL: !Ref RollbackReportDLQ", new: "",
			want: "COMPENSATE_DLQ_URL is not set"},
		{name: "default differs from the code", old: "    Default: 250ms\n    AllowedPattern: \"^([0-9]+(\\\\.[0-9]+)?(ms|s|m|h))+$\"\n    Description: FILL_GRACE",
			new:  "    Default: 3s\n    AllowedPattern: \"^([0-9]+(\\\\.[0-9]+)?(ms|s|m|h))+$\"\n    Description: FILL_GRACE",
			want: "parameter defaults give"},
		{name: "invalid value", old: "    Default: 500ms\n    AllowedPattern: \"^([0-9]+(\\\\.[0-9]+)?(ms|s|m|h))+$\"\n    Description: COMPENSATE_RETRY_INTERVAL",
			new:  "    Default: soon\n    AllowedPattern: \"^([0-9]+(\\\\.[0-9]+)?(ms|s|m|h))+$\"\n    Description: COMPENSATE_RETRY_INTERVAL",
			want: "COMPENSATE_RETRY_INTERVAL"},
		{name: "queue action missing", old: "                  - sqs:GetQueueUrl\n", new: "",
			want: "CompensateFunction: needs sqs:GetQueueUrl"},
		{name: "mapping action missing", old: "                  - sqs:ReceiveMessage\n", new: "",
			want: "CompensateFunction: needs sqs:ReceiveMessage"},
		{name: "action nothing calls", old: "Action: sqs:SendMessage\n                Resource: !GetAtt RollbackReportDLQ.Arn",
			new:  "Action: [sqs:SendMessage, sqs:PurgeQueue]\n                Resource: !GetAtt RollbackReportDLQ.Arn",
			want: "CompensateFunction: its role allows sqs:PurgeQueue, which nothing calls"},
		{name: "migrate make target missing", old: " Deliver Migrate\n", new: " Deliver\n", breakMakefile: true,
			want: "no build-MigrateFunction target"},
		{name: "a function that does not wait for the migrations",
			old:  "  SweepFunction:\n    Type: AWS::Serverless::Function\n    # Created (and, on an update, changed) only after the migrations ran,\n    # so its schedule or event source never starts it on an old schema.\n    DependsOn: MigrationsDone\n",
			new:  "  SweepFunction:\n    Type: AWS::Serverless::Function\n",
			want: "SweepFunction: does not DependsOn MigrationsDone"},
		{name: "the gate does not wait", old: "Migrations: !If [RunMigrations, !Ref Migrations, applied outside this stack]", new: "Migrations: none",
			want: "MigrationsDone: does not reference Migrations"},
		{name: "new builds never migrated", old: "CodeVersion: !Ref MigrateFunction.Version", new: `CodeVersion: "1"`,
			want: "a new build would not be migrated"},
		{name: "CloudFormation gives up first", old: "ServiceTimeout: 900", new: "ServiceTimeout: 120",
			want: "ServiceTimeout 120 must exceed MigrateFunction's Timeout 300"},
		{name: "migrations cannot be turned off", old: "    Type: Custom::OutboxMigrations\n    Condition: RunMigrations\n", new: "    Type: Custom::OutboxMigrations\n",
			want: "Migrations: not created only when RunMigrations"},
		{name: "migrate logs anywhere", old: "Resource: !GetAtt MigrateLogGroup.Arn", new: `Resource: "*"`,
			want: "MigrateRole: logs:CreateLogStream on *, want its own log group"},
		{name: "a role with an action nothing needs", old: "Action: [logs:CreateLogStream, logs:PutLogEvents]\n                Resource: !GetAtt MigrateLogGroup.Arn",
			new:  "Action: [logs:CreateLogStream, logs:PutLogEvents, rds:DeleteDBInstance]\n                Resource: !GetAtt MigrateLogGroup.Arn",
			want: "MigrateRole: allows rds:DeleteDBInstance"},
		{name: "RDS-managed secret without its host", old: "DATABASE_HOST: !If [UseSecretWithHost, !Ref DatabaseHost, !Ref AWS::NoValue]", new: "",
			want: "DATABASE_HOST = \"\", want the DatabaseHost parameter"},
		{name: "CA bundle not passed", old: "DATABASE_CA_SECRET_ARN: !If [HasCaSecret, !Ref DatabaseCaSecretArn, !Ref AWS::NoValue]", new: "",
			want: "DATABASE_CA_SECRET_ARN = \"\""},
		{name: "a widget on a metric the code does not emit", old: `"OperatorFilled", "Stack"`, new: `"OperatorFiled", "Stack"`,
			want: "OperatorFiled with Function=\"fill\", which the fill function's code does not emit"},
		{name: "a widget on another function's metric", old: `["Outboxkeeper", "Lag", "Stack", "${AWS::StackName}", "Function", "fill"`,
			new:  `["Outboxkeeper", "Lag", "Stack", "${AWS::StackName}", "Function", "sweep"`,
			want: "Lag with Function=\"sweep\", which the sweep function's code does not emit"},
		{name: "a widget without the stack", old: `["Outboxkeeper", "DeadLettered", "Stack", "${AWS::StackName}", "Function", "sweep"`,
			new:  `["Outboxkeeper", "DeadLettered", "Function", "sweep"`,
			want: "DeadLettered has dimensions [Function], the code emits [Stack Function]"},
		{name: "a widget on another stack", old: `["Outboxkeeper", "Redeliveries", "Stack", "${AWS::StackName}"`,
			new:  `["Outboxkeeper", "Redeliveries", "Stack", "outboxkeeper"`,
			want: "Redeliveries is not selected by this stack's name"},
		{name: "the dashboard loses the operator's placeholders",
			old:  `["Outboxkeeper", "OperatorFilled", "Stack", "${AWS::StackName}", "Function", "fill", {"label": "operator (skip-stall)"}]`,
			new:  `["Outboxkeeper", "Filled", "Stack", "${AWS::StackName}", "Function", "fill", {"label": "operator (skip-stall)"}]`,
			want: "no widget shows Outboxkeeper OperatorFilled for Function=fill"},
		{name: "an alarm without the stack", old: "      MetricName: Lag\n      Dimensions:\n        - { Name: Stack, Value: !Ref AWS::StackName }\n",
			new:  "      MetricName: Lag\n      Dimensions:\n",
			want: "FillLagAlarm: Lag has dimensions [Function], the code emits [Stack Function]"},
		{name: "an alarm on a metric nothing emits", old: "      MetricName: SweepRuns\n", new: "      MetricName: SweepRun\n",
			want: "SweepSilentAlarm: SweepRun with Function=\"sweep\", which the sweep function's code does not emit"},
		{name: "silence treated as OK",
			old:  "      Statistic: SampleCount\n      Period: 60\n      EvaluationPeriods: 5\n      DatapointsToAlarm: 5\n      Threshold: 1\n      ComparisonOperator: LessThanThreshold\n      TreatMissingData: breaching\n",
			new:  "      Statistic: SampleCount\n      Period: 60\n      EvaluationPeriods: 5\n      DatapointsToAlarm: 5\n      Threshold: 1\n      ComparisonOperator: LessThanThreshold\n      TreatMissingData: notBreaching\n",
			want: "no alarm fires when the fill function stops running"},
		{name: "the operator policy misses a call the CLI makes", old: "              - sqs:ChangeMessageVisibility\n              - sqs:DeleteMessage\n",
			new:  "              - sqs:DeleteMessage\n",
			want: "OperatorPolicy: the CLI calls sqs:ChangeMessageVisibility"},
		{name: "the operator policy allows more", old: "              - sqs:SendMessage\n              - sqs:GetQueueAttributes\n            Resource: !GetAtt RollbackReportQueue.Arn",
			new:  "              - sqs:SendMessage\n              - sqs:PurgeQueue\n              - sqs:GetQueueAttributes\n            Resource: !GetAtt RollbackReportQueue.Arn",
			want: "OperatorPolicy: allows sqs:PurgeQueue, which the CLI never calls"},
		{name: "a budget's range the code does not have", old: "SWEEP_PASS_BUDGET - time one pass may take (a Go duration, 100ms to 15m)",
			new:  "SWEEP_PASS_BUDGET - time one pass may take (a Go duration, 1s to 15m)",
			want: `SweepPassBudget (SWEEP_PASS_BUDGET): the description "SWEEP_PASS_BUDGET - time one pass may take (a Go duration, 1s to 15m)." does not state the code's range "(a Go duration, 100ms to 15m"`},
		{name: "a maximum the code does not have", old: "    MaxValue: 1000\n    Description: COMPENSATE_MAX_DEFERRALS", new: "    MaxValue: 999\n    Description: COMPENSATE_MAX_DEFERRALS",
			want: "CompensateMaxDeferrals (COMPENSATE_MAX_DEFERRALS): MaxValue 999, the code's most is 1000"},
		{name: "a minimum the code does not have", old: "    MinValue: 0\n    MaxValue: 1000000\n", new: "    MinValue: 1\n    MaxValue: 1000000\n",
			want: "SweepMaxRedeliveries (SWEEP_MAX_REDELIVERIES): MinValue 1, the code's least is 0"},
		{name: "an off the code does not have", old: "(a Go duration, at least 1s).", new: "(a Go duration, at least 1s; 0s - never).",
			want: `SweepStuckAfter (SWEEP_STUCK_AFTER): the description says what 0 means: true; in the code 0 is ""`},
		{name: "a bounded variable set by hand", old: "COMPENSATE_PASS_BUDGET: !Ref CompensatePassBudget", new: "COMPENSATE_PASS_BUDGET: 30s",
			want: "CompensateFunction: COMPENSATE_PASS_BUDGET is not set from a parameter"},
		{name: "a schema pattern longer than the check", old: `AllowedPattern: "^[a-z_][a-z0-9_]{0,51}$"`, new: `AllowedPattern: "^[a-z_][a-z0-9_]{0,62}$"`,
			want: `OutboxSchema: AllowedPattern takes "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa": true, the schema check: false`},
		{name: "the relay allowed another service's action", old: "                    - sns:Publish\n", new: "                    - sqs:SendMessage\n",
			want: "RelayTarget arn:aws:sns:eu-west-1:123456789012:orders.fifo: RelayRole allows [sqs:SendMessage] on the target, want [sns:Publish]"},
		{name: "the relay allowed every resource", old: "Resource: !Ref RelayTarget", new: `Resource: "*"`,
			want: "RelayRole allows kinesis:PutRecords on *, want the target only"},
		{name: "the relay's silence alarm on a metric nothing emits", old: "      MetricName: RelayRuns\n", new: "      MetricName: RelayRun\n",
			want: "RelaySilentAlarm: RelayRun with Function=\"relay\", which the relay function's code does not emit"},
		{name: "the relay's silence treated as OK", old: "      TreatMissingData: breaching\n      ActionsEnabled: !If [RelaySchedulesEnabled, true, false]\n",
			new:  "      TreatMissingData: notBreaching\n      ActionsEnabled: !If [RelaySchedulesEnabled, true, false]\n",
			want: "no alarm fires when the relay function stops running"},
		{name: "a relay widget on a fixed relay name", old: `"Function", "relay:${RelayName}", {"label": "lag (max)"}`, new: `"Function", "relay:default", {"label": "lag (max)"}`,
			want: "RelayLag with Function=\"relay:default\", want relay:${RelayName}"},
		{name: "the relay's timeout cuts the watch short", old: "      Timeout: 90 # RELAY_PASS_BUDGET", new: "      Timeout: 60 # RELAY_PASS_BUDGET",
			want: "RelayFunction: a pass may watch 58s"},
		{name: "the relay without the hand-over's concurrency", old: "ReservedConcurrentExecutions: 2 # the hand-over's two", new: "ReservedConcurrentExecutions: 1",
			want: "RelayFunction: scheduled, but ReservedConcurrentExecutions is not 2"},
		{name: "the relay's lag alarm on another dimension", old: "      MetricName: RelayLag\n      Dimensions:\n        - { Name: Stack, Value: !Ref AWS::StackName }\n",
			new:  "      MetricName: RelayLag\n      Dimensions:\n",
			want: "RelayLagAlarm: RelayLag has dimensions [Function], the code emits [Stack Function]"},
		{name: "pattern refuses a valid duration", old: `AllowedPattern: "^([0-9]+(s|m|h))+$"`, new: `AllowedPattern: "^[0-9]+(s|m|h)$"`,
			want: `CompensateDefer: AllowedPattern refuses "1m30s"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tplText, mk := text, makefile
			target := &tplText
			if c.breakMakefile {
				target = &mk
			}
			if strings.Count(*target, c.old) != 1 {
				t.Fatalf("the mutation's anchor %q must occur exactly once", c.old)
			}
			*target = strings.Replace(*target, c.old, c.new, 1)
			problems := allChecks(loadTemplate(t, tplText), mk, fromCode)
			for _, p := range problems {
				if strings.Contains(p, c.want) {
					return
				}
			}
			t.Fatalf("no problem mentions %q; got %q", c.want, problems)
		})
	}
}
