package deploy

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/cfn"
)

// checkMigrations: the Migrations custom resource runs the migrate
// function, is sent Update whenever a new build is deployed, is answered
// before CloudFormation gives up on it, can be turned off, and every other
// function is created and updated only after it.
func checkMigrations(tpl *template) []string {
	var problems []string
	const fn, res, gate = "MigrateFunction", "Migrations", "MigrationsDone"
	if get(tpl.Parameters, "MigrationsEnabled", "Default") != "true" {
		problems = append(problems, "MigrationsEnabled does not default to true")
	}
	if want := map[string]any{"Fn::Equals": []any{map[string]any{"Ref": "MigrationsEnabled"}, "true"}}; !reflect.DeepEqual(tpl.Conditions["RunMigrations"], want) {
		problems = append(problems, "condition RunMigrations is not MigrationsEnabled = true")
	}
	for _, id := range []string{fn, res, "MigrateRole", "MigrateLogGroup"} {
		if get(tpl.Resources[id], "Condition") != "RunMigrations" {
			problems = append(problems, id+": not created only when RunMigrations")
		}
	}
	r := tpl.Resources[res]
	if typ, _ := get(r, "Type").(string); !strings.HasPrefix(typ, "Custom::") && typ != "AWS::CloudFormation::CustomResource" {
		problems = append(problems, res+": not a custom resource")
	}
	if !reflect.DeepEqual(get(r, "Properties", "ServiceToken"), map[string]any{"Fn::GetAtt": []any{fn, "Arn"}}) {
		problems = append(problems, res+": ServiceToken is not !GetAtt "+fn+".Arn")
	}
	// Without a property that changes with the code, a new build's
	// migrations would never run: CloudFormation sends Update only when a
	// property changes.
	if !reflect.DeepEqual(get(r, "Properties", "CodeVersion"), map[string]any{"Ref": fn + ".Version"}) || get(tpl.Resources[fn], "Properties", "AutoPublishAlias") == nil {
		problems = append(problems, res+": CodeVersion is not !Ref "+fn+".Version of an AutoPublishAlias function: a new build would not be migrated")
	}
	timeout, ok1 := number(tpl.property(fn, "Timeout"))
	wait, ok2 := number(get(r, "Properties", "ServiceTimeout"))
	if !ok1 || !ok2 || wait <= timeout {
		problems = append(problems, fmt.Sprintf("%s: ServiceTimeout %v must exceed %s's Timeout %v, so an answer is always awaited", res, get(r, "Properties", "ServiceTimeout"), fn, tpl.property(fn, "Timeout")))
	}
	if m, _ := get(tpl.Resources[gate], "Metadata", "Migrations", "Fn::If").([]any); len(m) != 3 || m[0] != "RunMigrations" ||
		!reflect.DeepEqual(m[1], map[string]any{"Ref": res}) {
		problems = append(problems, gate+": does not reference "+res+" when RunMigrations, so nothing waits for it")
	}
	for _, other := range tpl.functions() {
		if other == fn {
			continue
		}
		var deps []any
		switch d := get(tpl.Resources[other], "DependsOn").(type) {
		case string:
			deps = []any{d}
		case []any:
			deps = d
		}
		if !slices.Contains(deps, any(gate)) {
			problems = append(problems, other+": does not DependsOn "+gate+": it could run before the migrations")
		}
	}
	return problems
}

// checkRoles: each function's role has its own log group and nothing else
// of the kind, the database login policy, ENI management only in a VPC,
// the deliver function's pushes on DeliverTargets only, and no managed
// policy beyond those. (SQS actions are checked against the code by
// checkSQSPermissions.)
func checkRoles(tpl *template) []string {
	var problems []string
	wantManaged := []any{
		map[string]any{"Ref": "DatabaseAccessPolicy"},
		map[string]any{"Fn::If": []any{"HasVpc",
			map[string]any{"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/service-role/AWSLambdaENIManagementAccess"},
			map[string]any{"Ref": "AWS::NoValue"}}},
	}
	for _, fn := range tpl.functions() {
		// The migrate function alone has the owner's login.
		want := wantManaged
		if fn == "MigrateFunction" {
			want = append([]any{map[string]any{"Ref": "OwnerAccessPolicy"}}, wantManaged[1:]...)
		}
		att, _ := get(tpl.Resources[fn], "Properties", "Role", "Fn::GetAtt").([]any)
		if len(att) != 2 {
			problems = append(problems, fn+": Role is not !GetAtt <role>.Arn")
			continue
		}
		role := att[0].(string)
		if got := get(tpl.Resources[role], "Properties", "ManagedPolicyArns"); !reflect.DeepEqual(got, want) {
			problems = append(problems, fmt.Sprintf("%s: managed policies %v, want the database login and ENI management in a VPC only", role, got))
		}
		logGroup, _ := get(tpl.property(fn, "LoggingConfig"), "LogGroup", "Ref").(string)
		if logGroup == "" {
			problems = append(problems, fn+": no LoggingConfig.LogGroup of its own")
		}
		policies, _ := get(tpl.Resources[role], "Properties", "Policies").([]any)
		for _, p := range policies {
			statements, _ := get(p, "PolicyDocument", "Statement").([]any)
			for _, st := range statements {
				for _, name := range statementActions(st) {
					switch {
					case strings.HasPrefix(name, "logs:"):
						if !reflect.DeepEqual(get(st, "Resource"), map[string]any{"Fn::GetAtt": []any{logGroup, "Arn"}}) {
							problems = append(problems, fmt.Sprintf("%s: %s on %v, want its own log group %s only", role, name, get(st, "Resource"), logGroup))
						}
					case strings.HasPrefix(name, "sqs:"):
					case (name == "sns:Publish" || name == "events:PutEvents") && role == "DeliverRole":
						// The recipients' targets: the DeliverTargets ARNs only.
						if r, _ := get(st, "Resource", "Fn::If").([]any); len(r) != 3 || r[0] != "HasDeliverTargets" ||
							!reflect.DeepEqual(r[1], map[string]any{"Ref": "DeliverTargets"}) {
							problems = append(problems, fmt.Sprintf("%s: %s on %v, want the DeliverTargets only", role, name, get(st, "Resource")))
						}
					case role == "RelayRole" && slices.Contains(slices.Collect(maps.Values(relayActions)), name):
						// The target's action, by its kind: checkRelayTarget.
					default:
						problems = append(problems, fmt.Sprintf("%s: allows %s, which no function needs", role, name))
					}
				}
			}
		}
	}
	return problems
}

// TestCustomResourceSampleEvents keeps events/custom-resource-*.json what
// CloudFormation sends the migrate function (functions/migrate's tests
// replay them under aws-lambda-rie, and `sam local invoke MigrateFunction
// -e` takes them): each decodes as a request of its type for the
// template's Migrations resource, with the template's properties.
func TestCustomResourceSampleEvents(t *testing.T) {
	tpl := loadTemplate(t, read(t, templatePath))
	resType, _ := get(tpl.Resources["Migrations"], "Type").(string)
	props, _ := get(tpl.Resources["Migrations"], "Properties").(map[string]any)
	for kind, rt := range map[string]cfn.RequestType{"create": cfn.RequestCreate, "update": cfn.RequestUpdate, "delete": cfn.RequestDelete} {
		var ev cfn.Event
		if err := json.Unmarshal([]byte(read(t, "../../events/custom-resource-"+kind+".json")), &ev); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if ev.RequestType != rt {
			t.Errorf("%s: RequestType %s", kind, ev.RequestType)
		}
		if ev.LogicalResourceID != "Migrations" || ev.ResourceType != resType {
			t.Errorf("%s: resource %s of type %s, want Migrations of type %s", kind, ev.LogicalResourceID, ev.ResourceType, resType)
		}
		if (ev.PhysicalResourceID == "") != (rt == cfn.RequestCreate) {
			t.Errorf("%s: PhysicalResourceId %q: CloudFormation sends one with Update and Delete only", kind, ev.PhysicalResourceID)
		}
		if u, err := url.Parse(ev.ResponseURL); err != nil || u.Scheme != "https" || !strings.Contains(u.RawQuery, "X-Amz-Signature=") {
			t.Errorf("%s: ResponseURL %q is not a pre-signed https URL", kind, ev.ResponseURL)
		}
		for name := range props {
			if name == "ServiceToken" || name == "ServiceTimeout" {
				continue // CloudFormation's own, not the provider's
			}
			if _, ok := ev.ResourceProperties[name]; !ok {
				t.Errorf("%s: ResourceProperties lacks the template's %s", kind, name)
			}
		}
	}
}
