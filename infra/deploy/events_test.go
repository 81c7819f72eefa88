package deploy

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// TestSampleEvents keeps events/ usable with `sam local invoke -e`: the
// scheduled input is what the template sends, and the envelopes decode
// into aws-lambda-go's types.
func TestSampleEvents(t *testing.T) {
	tpl := loadTemplate(t, read(t, templatePath))
	schedule := strings.TrimSpace(read(t, "../../events/schedule.json"))
	for _, fn := range []string{"FillFunction", "SweepFunction"} {
		evs := tpl.events(fn, "ScheduleV2")
		if len(evs) != 1 {
			t.Errorf("%s: %d ScheduleV2 events, want 1", fn, len(evs))
			continue
		}
		if evs[0]["Input"] != schedule {
			t.Errorf("%s: schedule Input %v differs from events/schedule.json %s", fn, evs[0]["Input"], schedule)
		}
	}
	var cw events.CloudWatchEvent
	if err := json.Unmarshal([]byte(read(t, "../../events/scheduled-event.json")), &cw); err != nil {
		t.Errorf("events/scheduled-event.json: %v", err)
	}
	if cw.DetailType != "Scheduled Event" {
		t.Errorf("events/scheduled-event.json: detail-type %q, want Scheduled Event", cw.DetailType)
	}
	if cw.Source != "aws.events" {
		t.Errorf("events/scheduled-event.json: source %q, want aws.events", cw.Source)
	}
	var sqs events.SQSEvent
	if err := json.Unmarshal([]byte(read(t, "../../events/sqs.json")), &sqs); err != nil {
		t.Fatal(err)
	}
	valid := 0
	for i, r := range sqs.Records {
		if r.EventSource != "aws:sqs" {
			t.Errorf("events/sqs.json record %d: eventSource %q, want aws:sqs", i, r.EventSource)
		}
		if r.MessageId == "" {
			t.Errorf("events/sqs.json record %d: no messageId", i)
		}
		if r.Attributes["ApproximateReceiveCount"] == "" {
			t.Errorf("events/sqs.json record %d: no ApproximateReceiveCount, which the handler reads", i)
		}
		if json.Valid([]byte(r.Body)) {
			valid++
		}
	}
	if len(sqs.Records) != 2 {
		t.Errorf("events/sqs.json: %d records, want one valid and one malformed report", len(sqs.Records))
	}
	if valid != 1 {
		t.Errorf("events/sqs.json: %d records with a valid JSON body, want 1", valid)
	}
}
