package migrateresource

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/cfn"
)

// A database error can be long (a whole statement in its context); the
// response must still fit CloudFormation's 4096 bytes, or the stack waits
// for an answer it will refuse.
func TestLongReasonIsShortenedToFit(t *testing.T) {
	for _, reason := range []string{strings.Repeat("x", 10000), strings.Repeat(`"é\`, 3000)} {
		r := cfn.Response{Status: cfn.StatusFailed, RequestID: "r", LogicalResourceID: "Migrations",
			StackID: "arn:aws:cloudformation:us-east-1:123456789012:stack/s/1", PhysicalResourceID: "p", Reason: reason}
		body, err := encode(r)
		if err != nil {
			t.Fatal(err)
		}
		if len(body) > MaxResponseBytes {
			t.Errorf("body of %d bytes, over %d", len(body), MaxResponseBytes)
		}
		var back cfn.Response
		if err := json.Unmarshal(body, &back); err != nil {
			t.Fatalf("not JSON: %v", err)
		}
		if !strings.HasSuffix(back.Reason, cut) {
			t.Errorf("Reason %q… does not say it was shortened", back.Reason[:20])
		}
		if !strings.HasPrefix(reason, strings.TrimSuffix(back.Reason, cut)) {
			t.Error("the shortened Reason is not the start of the original")
		}
	}
}

func TestShortReasonIsKeptWhole(t *testing.T) {
	body, err := encode(cfn.Response{Status: cfn.StatusFailed, Reason: "relation exists"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(body), `"Reason":"relation exists"`) {
		t.Errorf("body %s", body)
	}
}

func TestPhysicalIDIsStable(t *testing.T) {
	if got := physicalID(cfn.Event{RequestType: cfn.RequestCreate}, "outbox"); got != "outboxkeeper-migrations-outbox" {
		t.Errorf("Create: %q", got)
	}
	for _, rt := range []cfn.RequestType{cfn.RequestUpdate, cfn.RequestDelete} {
		if got := physicalID(cfn.Event{RequestType: rt, PhysicalResourceID: "given"}, "other"); got != "given" {
			t.Errorf("%s: %q, want the id CloudFormation sent", rt, got)
		}
	}
}

func TestRollingBackIsAnUpdateToALowerCodeVersion(t *testing.T) {
	arn := "arn:aws:lambda:us-east-1:123456789012:function:outboxkeeper-MigrateFunction-Ab12:"
	cases := []struct {
		name     string
		rt       cfn.RequestType
		to, from string
		want     bool
	}{
		{"a new build", cfn.RequestUpdate, arn + "3", arn + "2", false},
		{"the way back", cfn.RequestUpdate, arn + "2", arn + "3", true},
		{"past ten", cfn.RequestUpdate, arn + "9", arn + "10", true},
		{"the same version (another property changed)", cfn.RequestUpdate, arn + "3", arn + "3", false},
		{"not a version", cfn.RequestUpdate, "1", "x", false},
		{"a Create", cfn.RequestCreate, arn + "2", arn + "3", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := cfn.Event{RequestType: c.rt,
				ResourceProperties:    map[string]any{"CodeVersion": c.to},
				OldResourceProperties: map[string]any{"CodeVersion": c.from}}
			if got := rollingBack(ev); got != c.want {
				t.Errorf("rollingBack = %v, want %v", got, c.want)
			}
		})
	}
}
