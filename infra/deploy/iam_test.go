package deploy

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// The SQS permissions are checked against the code rather than a list kept
// by hand: a role that lacks an action its function calls fails only on AWS
// (fauxqs checks no IAM), and an action nobody calls is privilege for
// nothing.

const sqsImport = "github.com/aws/aws-sdk-go-v2/service/sqs"

// esmActions are what Lambda's SQS event source mapping calls with the
// function's role (AWS's AWSLambdaSQSQueueExecutionRole).
var esmActions = []string{"sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:ReceiveMessage"}

// sqsCalls lists, per function, the SQS operations its code calls: each
// method of *sqs.Client called by name in a non-test file that imports the
// SQS package, in any of this module's packages the function's main
// package depends on.
func sqsCalls(t *testing.T, fns []string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, fn := range fns {
		out[fn] = sqsCallsIn(t, "../../functions/"+shortName(fn))
	}
	return out
}

// sqsCallsIn lists the SQS operations (sqs:Name) called by the package at
// dir and this module's packages it depends on.
func sqsCallsIn(t *testing.T, dir string) []string {
	t.Helper()
	operations := map[string]bool{}
	client := reflect.TypeOf(&sqs.Client{})
	for i := range client.NumMethod() {
		operations[client.Method(i).Name] = true
	}
	seen := map[string]bool{}
	for _, file := range moduleFiles(t, dir) {
		for _, op := range calledOperations(t, file, operations) {
			seen["sqs:"+iamAction(op)] = true
		}
	}
	var out []string
	for a := range seen {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// iamAction is the IAM action that authorises an SQS operation: a batch
// operation is authorised by its single-message action.
func iamAction(op string) string {
	if single, ok := strings.CutSuffix(op, "Batch"); ok {
		return single
	}
	return op
}

func calledOperations(t *testing.T, path string, operations map[string]bool) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(f.Imports, func(s *ast.ImportSpec) bool { p, _ := strconv.Unquote(s.Path.Value); return p == sqsImport }) {
		return nil
	}
	var ops []string
	ast.Inspect(f, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && operations[sel.Sel.Name] {
				ops = append(ops, sel.Sel.Name)
			}
		}
		return true
	})
	return ops
}

// statementActions is a policy statement's Action, one or a list; of an
// Fn::If, every branch's (what some deployment may allow).
func statementActions(st any) []string { return actionsOf(get(st, "Action")) }

func actionsOf(v any) []string {
	var out []string
	switch a := v.(type) {
	case string:
		out = []string{a}
	case []any:
		for _, x := range a {
			out = append(out, actionsOf(x)...)
		}
	case map[string]any:
		if args, ok := a["Fn::If"].([]any); ok && len(args) == 3 {
			out = append(actionsOf(args[1]), actionsOf(args[2])...)
		}
	}
	return out
}

// relayActions is the one action the relay's role allows on its target,
// by the target's kind: the call its sender makes (shared/target), as IAM
// authorises it.
var relayActions = map[string]string{
	"arn:aws:events:eu-west-1:123456789012:event-bus/orders": "events:PutEvents",
	"arn:aws:sns:eu-west-1:123456789012:orders.fifo":         "sns:Publish",
	"arn:aws:sqs:eu-west-1:123456789012:orders":              "sqs:SendMessage",
	"arn:aws:kinesis:eu-west-1:123456789012:stream/orders":   "kinesis:PutRecords",
}

// checkRelayTarget: for each kind of target the relay's role allows
// exactly its sender's action, on the target's ARN and nothing else.
func checkRelayTarget(tpl *template) []string {
	var problems []string
	for _, arn := range slices.Sorted(maps.Keys(relayActions)) {
		e := tpl.evaluator(scenario{name: "relay", params: map[string]string{"RelayTarget": arn}})
		if !e.exists("RelayFunction") || !e.exists("RelayRole") {
			problems = append(problems, fmt.Sprintf("RelayTarget %s: no relay function and role", arn))
			continue
		}
		var allowed []string
		policies, _ := get(tpl.Resources["RelayRole"], "Properties", "Policies").([]any)
		for _, p := range policies {
			if _, none := e.value(p).(noValue); none {
				continue
			}
			statements, _ := get(e.value(p), "PolicyDocument", "Statement").([]any)
			for _, st := range statements {
				action := e.value(get(st, "Action"))
				for _, a := range actionsOf(action) {
					if strings.HasPrefix(a, "logs:") || strings.HasPrefix(a, "xray:") {
						continue
					}
					if res := e.str(get(st, "Resource")); res != arn {
						problems = append(problems, fmt.Sprintf("RelayTarget %s: RelayRole allows %s on %s, want the target only", arn, a, res))
					}
					allowed = append(allowed, a)
				}
			}
		}
		if want := []string{relayActions[arn]}; !slices.Equal(allowed, want) {
			problems = append(problems, fmt.Sprintf("RelayTarget %s: RelayRole allows %v on the target, want %v", arn, allowed, want))
		}
	}
	return problems
}

// roleSQSActions lists the sqs: actions the inline policies of a
// function's role allow.
func (tpl *template) roleSQSActions(fn string) ([]string, error) {
	att, _ := get(tpl.Resources[fn], "Properties", "Role", "Fn::GetAtt").([]any)
	if len(att) != 2 || att[1] != "Arn" {
		return nil, fmt.Errorf("%s: Role is not !GetAtt <role>.Arn", fn)
	}
	role := att[0].(string)
	if get(tpl.Resources[role], "Type") != "AWS::IAM::Role" {
		return nil, fmt.Errorf("%s: %s is not an AWS::IAM::Role", fn, role)
	}
	var actions []string
	policies, _ := get(tpl.Resources[role], "Properties", "Policies").([]any)
	for _, p := range policies {
		statements, _ := get(p, "PolicyDocument", "Statement").([]any)
		for _, s := range statements {
			if get(s, "Effect") != "Allow" {
				continue
			}
			for _, name := range statementActions(s) {
				if strings.HasPrefix(name, "sqs:") {
					actions = append(actions, name)
				}
			}
		}
	}
	return actions, nil
}

// checkSQSPermissions: each role allows exactly the SQS actions its
// function calls, plus the event source mapping's when it has an SQS event.
func checkSQSPermissions(tpl *template, calls map[string][]string) []string {
	var problems []string
	for _, fn := range tpl.functions() {
		granted, err := tpl.roleSQSActions(fn)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		needed := slices.Clone(calls[fn])
		if len(tpl.events(fn, "SQS")) > 0 {
			needed = append(needed, esmActions...)
		}
		for _, a := range needed {
			if !slices.Contains(granted, a) {
				problems = append(problems, fmt.Sprintf("%s: needs %s, which its role does not allow", fn, a))
			}
		}
		for _, a := range granted {
			if !slices.Contains(needed, a) {
				problems = append(problems, fmt.Sprintf("%s: its role allows %s, which nothing calls", fn, a))
			}
		}
	}
	return problems
}

func TestSQSCallsFoundInCode(t *testing.T) {
	calls := sqsCalls(t, []string{"CompensateFunction", "FillFunction"})
	want := []string{"sqs:ChangeMessageVisibility", "sqs:GetQueueUrl", "sqs:SendMessage"}
	if !reflect.DeepEqual(calls["CompensateFunction"], want) {
		t.Errorf("compensate calls %v, want %v", calls["CompensateFunction"], want)
	}
	if len(calls["FillFunction"]) != 0 {
		t.Errorf("fill calls %v, want none", calls["FillFunction"])
	}
}
