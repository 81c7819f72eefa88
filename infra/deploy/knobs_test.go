package deploy

import (
	"bufio"
	"fmt"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The account-policy knobs (PermissionsBoundary, Tracing, QueueKmsKeyArn,
// LogsKmsKeyArn, LogRetentionDays) are checked under every parameter
// combination that check.sh lints (infra/deploy/combinations.txt): each
// one set reaches every resource of its kind, and unset it is absent.

// combinations reads infra/deploy/combinations.txt.
func combinations(t *testing.T) []scenario {
	t.Helper()
	f, err := os.Open("combinations.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []scenario
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		s := scenario{name: fields[0], params: map[string]string{}}
		for _, kv := range fields[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				t.Fatalf("combinations.txt: %s: %q is not Key=Value", s.name, kv)
			}
			s.params[k] = v
		}
		out = append(out, s)
	}
	return out
}

// resolve is v with every Fn::If decided, every AWS::NoValue left out and
// every Ref to a parameter replaced by its value, at any depth: the value
// CloudFormation would create (other references stay as written).
func (e *evaluator) resolve(v any) any {
	v = e.value(v)
	switch x := v.(type) {
	case map[string]any:
		if ref, ok := x["Ref"].(string); ok && len(x) == 1 {
			if _, isParam := e.tpl.Parameters[ref]; isParam {
				return e.params[ref]
			}
		}
		out := make(map[string]any, len(x))
		for k, val := range x {
			r := e.resolve(val)
			if _, skip := r.(noValue); !skip {
				out[k] = r
			}
		}
		return out
	case []any:
		out := make([]any, 0, len(x))
		for _, val := range x {
			r := e.resolve(val)
			if _, skip := r.(noValue); !skip {
				out = append(out, r)
			}
		}
		return out
	}
	return v
}

// ofType lists the resources of a type that the scenario creates.
func (e *evaluator) ofType(typ string) []string {
	var ids []string
	for id, r := range e.tpl.Resources {
		if get(r, "Type") != typ {
			continue
		}
		if c, ok := get(r, "Condition").(string); ok && !e.condition(c) {
			continue
		}
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// props is a resource's resolved Properties.
func (e *evaluator) props(id string) map[string]any {
	p, _ := e.resolve(get(e.tpl.Resources[id], "Properties")).(map[string]any)
	return p
}

// knobStatements lists the Allow statements of a role's or managed
// policy's documents, resolved.
func (e *evaluator) statements(id string) []map[string]any {
	p := e.props(id)
	var docs []any
	if d, ok := p["PolicyDocument"]; ok {
		docs = append(docs, d)
	}
	pols, _ := p["Policies"].([]any)
	for _, pol := range pols {
		docs = append(docs, get(pol, "PolicyDocument"))
	}
	var out []map[string]any
	for _, d := range docs {
		sts, _ := get(d, "Statement").([]any)
		for _, st := range sts {
			if m, ok := st.(map[string]any); ok && m["Effect"] == "Allow" {
				out = append(out, m)
			}
		}
	}
	return out
}

func actionsWith(sts []map[string]any, prefix string) []string {
	var out []string
	for _, st := range sts {
		for _, a := range statementActions(st) {
			if strings.HasPrefix(a, prefix) {
				out = append(out, a)
			}
		}
	}
	sort.Strings(out)
	return out
}

// checkKnobs runs every knob check under one scenario.
func checkKnobs(tpl *template, sc scenario) []string {
	e := tpl.evaluator(sc)
	var p []string
	where := func(id string) string { return fmt.Sprintf("%s (%s)", id, sc.name) }
	param := func(name string) string { return e.params[name] }

	// PermissionsBoundary: every role written here, and every role SAM
	// makes (a schedule's; a function without its own role would get one).
	boundary := param("PermissionsBoundary")
	wantBoundary := func(id, what string, v any) {
		_, absent := v.(noValue)
		switch {
		case boundary == "" && !absent && v != nil:
			p = append(p, fmt.Sprintf("%s: %s has a permissions boundary %v while PermissionsBoundary is unset", where(id), what, v))
		case boundary != "" && v != boundary:
			p = append(p, fmt.Sprintf("%s: %s has permissions boundary %v, want PermissionsBoundary %s", where(id), what, v, boundary))
		}
	}
	for _, role := range e.ofType("AWS::IAM::Role") {
		wantBoundary(role, "the role", e.resolve(get(tpl.Resources[role], "Properties", "PermissionsBoundary")))
	}
	for _, fn := range e.ofType("AWS::Serverless::Function") {
		if get(tpl.Resources[fn], "Properties", "Role") == nil {
			wantBoundary(fn, "the role SAM makes for it", e.resolve(tpl.property(fn, "PermissionsBoundary")))
		}
		for _, typ := range []string{"ScheduleV2", "Schedule"} {
			for _, ev := range tpl.events(fn, typ) {
				if typ == "Schedule" {
					p = append(p, where(fn)+": a Schedule event (EventBridge rule): use ScheduleV2, whose role carries the boundary")
					continue
				}
				wantBoundary(fn, "its schedule's role", e.resolve(ev["PermissionsBoundary"]))
			}
		}
		for _, ev := range allEvents(tpl, fn) {
			if t := get(ev, "Type"); t != "ScheduleV2" && t != "SQS" {
				p = append(p, fmt.Sprintf("%s: a %v event may make a role this check does not know: teach checkKnobs its boundary", where(fn), t))
			}
		}
	}

	// Tracing: SAM turns the Tracing parameter into each function's
	// TracingConfig (none for Disabled); X-Ray's two actions are in each
	// function's role exactly while it is on.
	tracing := param("Tracing")
	for _, fn := range e.ofType("AWS::Serverless::Function") {
		if got := tpl.property(fn, "Tracing"); !reflect.DeepEqual(got, map[string]any{"Ref": "Tracing"}) {
			p = append(p, fmt.Sprintf("%s: Tracing is %v, not the Tracing parameter", where(fn), got))
		}
		role, _ := get(tpl.Resources[fn], "Properties", "Role", "Fn::GetAtt").([]any)
		if len(role) != 2 {
			continue
		}
		got := actionsWith(e.statements(role[0].(string)), "xray:")
		want := []string(nil)
		if tracing != "Disabled" {
			want = []string{"xray:PutTelemetryRecords", "xray:PutTraceSegments"}
		}
		if !slices.Equal(got, want) {
			p = append(p, fmt.Sprintf("%s: %s allows %v with Tracing %s, want %v", where(fn), role[0], got, tracing, want))
		}
	}

	// Queues: the customer managed key, or SQS's own encryption; never
	// both, never neither.
	queueKey := param("QueueKmsKeyArn")
	for _, q := range e.ofType("AWS::SQS::Queue") {
		props := e.props(q)
		if queueKey != "" && (props["KmsMasterKeyId"] != queueKey || props["SqsManagedSseEnabled"] != nil) {
			p = append(p, fmt.Sprintf("%s: KmsMasterKeyId %v, SqsManagedSseEnabled %v, want QueueKmsKeyArn and no SQS-managed encryption", where(q), props["KmsMasterKeyId"], props["SqsManagedSseEnabled"]))
		}
		if queueKey == "" && (props["KmsMasterKeyId"] != nil || props["SqsManagedSseEnabled"] != "true") {
			p = append(p, fmt.Sprintf("%s: KmsMasterKeyId %v, SqsManagedSseEnabled %v, want SQS-managed encryption alone", where(q), props["KmsMasterKeyId"], props["SqsManagedSseEnabled"]))
		}
	}
	// Whoever sends or receives on the queues may use the key, through
	// SQS only; nobody else may use it.
	users := map[string]bool{"CompensateRole": true, "ReportSenderPolicy": true, "OperatorPolicy": true}
	for _, id := range append(e.ofType("AWS::IAM::Role"), e.ofType("AWS::IAM::ManagedPolicy")...) {
		var got []string
		for _, st := range e.statements(id) {
			if r, _ := st["Resource"].(string); r == "" || r != queueKey {
				continue
			}
			for _, a := range statementActions(st) {
				got = append(got, a)
			}
			if via := get(st, "Condition", "StringEquals", "kms:ViaService"); !reflect.DeepEqual(via, map[string]any{"Fn::Sub": "sqs.${AWS::Region}.amazonaws.com"}) {
				p = append(p, fmt.Sprintf("%s: uses the queue key outside SQS (kms:ViaService %v)", where(id), via))
			}
		}
		sort.Strings(got)
		var want []string
		if queueKey != "" && users[id] {
			want = []string{"kms:Decrypt", "kms:GenerateDataKey"}
		}
		if !slices.Equal(got, want) {
			p = append(p, fmt.Sprintf("%s: %v on the queue key with QueueKmsKeyArn %q, want %v", where(id), got, queueKey, want))
		}
	}

	// Log groups: every function logs to one of the stack's, and each of
	// those is encrypted with the logs key and kept for the retention set.
	logsKey, retention := param("LogsKmsKeyArn"), param("LogRetentionDays")
	groups := e.ofType("AWS::Logs::LogGroup")
	for _, fn := range e.ofType("AWS::Serverless::Function") {
		if g, _ := get(tpl.property(fn, "LoggingConfig"), "LogGroup", "Ref").(string); !slices.Contains(groups, g) {
			p = append(p, fmt.Sprintf("%s: logs to %q, not a log group of this stack (Lambda would make one without the knobs)", where(fn), g))
		}
	}
	for _, g := range groups {
		props := e.props(g)
		if want := map[bool]any{true: logsKey, false: nil}[logsKey != ""]; props["KmsKeyId"] != want {
			p = append(p, fmt.Sprintf("%s: KmsKeyId %v, want %v (LogsKmsKeyArn %q)", where(g), props["KmsKeyId"], want, logsKey))
		}
		if want := map[bool]any{true: retention, false: nil}[retention != "0"]; props["RetentionInDays"] != want {
			p = append(p, fmt.Sprintf("%s: RetentionInDays %v, want %v (LogRetentionDays %s)", where(g), props["RetentionInDays"], want, retention))
		}
	}
	return p
}

// allEvents are a function's events, each with its Type.
func allEvents(tpl *template, fn string) []any {
	evs, _ := get(tpl.Resources[fn], "Properties", "Events").(map[string]any)
	var out []any
	for _, ev := range evs {
		out = append(out, ev)
	}
	return out
}

// knobCombinationsCover: the combinations include one with every knob
// unset, one with every knob set, and each knob both set and unset.
func knobCombinationsCover(scs []scenario) []string {
	// Each knob and the value that means off.
	knobs := map[string]string{"PermissionsBoundary": "", "Tracing": "Disabled", "QueueKmsKeyArn": "", "LogsKmsKeyArn": "", "LogRetentionDays": ""}
	var p []string
	set, unset := map[string]bool{}, map[string]bool{}
	allOff, allOn := false, false
	for _, sc := range scs {
		on := 0
		for k, off := range knobs {
			if v, ok := sc.params[k]; ok && v != off {
				set[k] = true
				on++
			} else {
				unset[k] = true
			}
		}
		allOff = allOff || on == 0
		allOn = allOn || on == len(knobs)
	}
	if !allOff || !allOn {
		p = append(p, fmt.Sprintf("combinations.txt: one with all knobs off: %v, all on: %v; want both", allOff, allOn))
	}
	for k := range knobs {
		if !set[k] || !unset[k] {
			p = append(p, fmt.Sprintf("combinations.txt: %s is set in some: %v, unset in some: %v; want both", k, set[k], unset[k]))
		}
	}
	return p
}

func TestKnobsReachEveryResourceUnderEveryCombination(t *testing.T) {
	tpl := loadTemplate(t, read(t, templatePath))
	scs := combinations(t)
	for _, prob := range knobCombinationsCover(scs) {
		t.Error(prob)
	}
	for _, sc := range scs {
		t.Run(sc.name, func(t *testing.T) {
			for _, prob := range checkKnobs(tpl, sc) {
				t.Error(prob)
			}
		})
	}
}

// Each knob's check fails when the template forgets the knob somewhere.
func TestKnobChecksCatchAMissingKnob(t *testing.T) {
	text := read(t, templatePath)
	scs := combinations(t)
	const boundary = "PermissionsBoundary: !If [HasPermissionsBoundary, !Ref PermissionsBoundary, !Ref AWS::NoValue]"
	// inPruneRole replaces old with new once, inside PruneRole.
	inPruneRole := func(old, new string) func(string) string {
		return func(text string) string {
			i := strings.Index(text, "  PruneRole:\n")
			return text[:i] + strings.Replace(text[i:], old, new, 1)
		}
	}
	cases := []struct {
		name, old, new, want string
		mutate               func(string) string
	}{
		{name: "a role without the boundary", old: "      Description: outboxkeeper sweep function\n      " + boundary + "\n",
			new: "      Description: outboxkeeper sweep function\n", want: "SweepRole (all-on): the role has permissions boundary <nil>"},
		{name: "a schedule's role without the boundary", old: "            Description: outboxkeeper prune pass\n            ScheduleExpression: rate(1 hour)\n            Input: '{\"source\":\"outboxkeeper.schedule\"}'\n            State: !Ref ScheduleState\n            OmitName: true\n            # The role SAM makes for the schedule to invoke the function.\n            " + boundary + "\n",
			new: "            Description: outboxkeeper prune pass\n            ScheduleExpression: rate(1 hour)\n            Input: '{\"source\":\"outboxkeeper.schedule\"}'\n            State: !Ref ScheduleState\n            OmitName: true\n", want: "PruneFunction (all-on): its schedule's role has permissions boundary <nil>"},
		{name: "tracing fixed on", old: "    Tracing: !Ref Tracing\n",
			new: "    Tracing: Active\n", want: "Tracing is Active, not the Tracing parameter"},
		{name: "X-Ray allowed with tracing off", mutate: inPruneRole("          - HasTracing\n", "          - UseSecret\n"),
			want: "PruneRole allows [xray:PutTelemetryRecords xray:PutTraceSegments] with Tracing Disabled, want []"},
		{name: "a queue without the key", old: "      KmsMasterKeyId: !If [HasQueueKmsKey, !Ref QueueKmsKeyArn, !Ref AWS::NoValue]\n      SqsManagedSseEnabled: !If [HasQueueKmsKey, !Ref AWS::NoValue, true]\n      RedrivePolicy:",
			new: "      SqsManagedSseEnabled: true\n      RedrivePolicy:", want: "RollbackReportQueue (all-on): KmsMasterKeyId <nil>"},
		{name: "a sender without the key", old: "            Resource: !GetAtt RollbackReportQueue.Arn\n          # With QueueKmsKeyArn: SQS encrypts each message with a data key.",
			new: "            Resource: !GetAtt RollbackReportQueue.Arn\n          # With QueueKmsKeyArn: SQS encrypts each message with a data key.\n          - Sid: x\n            Effect: Allow\n            Action: kms:Encrypt\n            Resource: !Ref QueueKmsKeyArn", want: "ReportSenderPolicy (all-on): [kms:Decrypt kms:Encrypt kms:GenerateDataKey] on the queue key"},
		{name: "a log group without the key", old: "      LogGroupName: !Sub /aws/lambda/${AWS::StackName}-prune\n      RetentionInDays: !If [HasLogRetention, !Ref LogRetentionDays, !Ref AWS::NoValue]\n      KmsKeyId: !If [HasLogsKmsKey, !Ref LogsKmsKeyArn, !Ref AWS::NoValue]\n",
			new: "      LogGroupName: !Sub /aws/lambda/${AWS::StackName}-prune\n      RetentionInDays: !If [HasLogRetention, !Ref LogRetentionDays, !Ref AWS::NoValue]\n", want: "PruneLogGroup (all-on): KmsKeyId <nil>"},
		{name: "a log group kept forever", old: "      LogGroupName: !Sub /aws/lambda/${AWS::StackName}-fill\n      RetentionInDays: !If [HasLogRetention, !Ref LogRetentionDays, !Ref AWS::NoValue]\n",
			new: "      LogGroupName: !Sub /aws/lambda/${AWS::StackName}-fill\n", want: "FillLogGroup (all-off): RetentionInDays <nil>, want 30"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mutated := text
			if c.mutate != nil {
				mutated = c.mutate(text)
			} else {
				if strings.Count(text, c.old) != 1 {
					t.Fatalf("the mutation's anchor %q must occur exactly once", c.old)
				}
				mutated = strings.Replace(text, c.old, c.new, 1)
			}
			if mutated == text {
				t.Fatal("the mutation changed nothing")
			}
			tpl := loadTemplate(t, mutated)
			var all []string
			for _, sc := range scs {
				all = append(all, checkKnobs(tpl, sc)...)
			}
			for _, prob := range all {
				if strings.Contains(prob, c.want) {
					return
				}
			}
			t.Fatalf("no problem mentions %q; got %q", c.want, all)
		})
	}
}
