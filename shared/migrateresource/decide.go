package migrateresource

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/cfn"
)

// applies says whether a request type applies the migrations: Create and
// Update do; Delete does nothing to the database (the outbox's data
// outlives the stack that maintained it). known is false for a type
// CloudFormation does not send.
func applies(rt cfn.RequestType) (apply, known bool) {
	switch rt {
	case cfn.RequestCreate, cfn.RequestUpdate:
		return true, true
	case cfn.RequestDelete:
		return false, true
	}
	return false, false
}

// rollingBack says whether an Update is CloudFormation rolling a failed
// deployment back: it sends the previous properties as ResourceProperties
// and the failed deployment's as OldResourceProperties. CodeVersion is the
// migrate function's published version, whose number only grows (every
// new build publishes the next), so a lower one than the old properties'
// is the way back. A rollback applies nothing: after a failed migration
// the schema is still where the older build expects it, and trying that
// migration again would most likely fail again and leave the stack in
// UPDATE_ROLLBACK_FAILED; after a later failure everything is applied.
func rollingBack(ev cfn.Event) bool {
	if ev.RequestType != cfn.RequestUpdate {
		return false
	}
	to, ok1 := codeVersion(ev.ResourceProperties)
	from, ok2 := codeVersion(ev.OldResourceProperties)
	return ok1 && ok2 && to < from
}

// codeVersion is the number at the end of a CodeVersion property (a
// function version ARN, ...:function:name:7, or the bare number).
func codeVersion(props map[string]any) (int, bool) {
	s, _ := props["CodeVersion"].(string)
	n, err := strconv.Atoi(s[strings.LastIndexByte(s, ':')+1:])
	return n, err == nil
}

// physicalID names the resource: one per schema, the same on every
// Create of it. Update and Delete answer with the id CloudFormation sent:
// a different one would tell it the resource was replaced and make it
// delete the old one.
func physicalID(ev cfn.Event, schema string) string {
	if ev.PhysicalResourceID != "" && ev.RequestType != cfn.RequestCreate {
		return ev.PhysicalResourceID
	}
	return "outboxkeeper-migrations-" + schema
}

// MaxResponseBytes is CloudFormation's limit on a custom resource
// response body. A larger one is refused, and the stack waits for an
// answer that never comes.
const MaxResponseBytes = 4096

// encode renders the response, shortening Reason (the database's error
// can be long) until the body fits MaxResponseBytes.
func encode(r cfn.Response) ([]byte, error) {
	for {
		body, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		over := len(body) - MaxResponseBytes
		if over <= 0 {
			return body, nil
		}
		if len(r.Reason) <= len(cut) {
			return nil, fmt.Errorf("response of %d bytes exceeds CloudFormation's %d with no Reason left to shorten", len(body), MaxResponseBytes)
		}
		// JSON escaping can make a character count several bytes: cut at
		// least what is over, then measure again.
		keep := max(0, len(r.Reason)-over-len(cut))
		for keep > 0 && !utf8.RuneStart(r.Reason[keep]) {
			keep--
		}
		r.Reason = r.Reason[:keep] + cut
	}
}

// cut marks a shortened Reason.
const cut = " [...]"
