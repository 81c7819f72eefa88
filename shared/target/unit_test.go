package target

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
)

func TestEnvelopeIsTheDocumentedShape(t *testing.T) {
	at := time.Date(2026, 12, 1, 20, 56, 0, 123456789, time.FixedZone("CET", 3600))
	got, err := Envelope(Event{Sequence: 42, Topic: "orders.created", RecordedAt: at,
		Headers: json.RawMessage(`{"tenant":"t1"}`), Payload: json.RawMessage(`{"id": 7, "b":[1, 2]}`)})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"sequence":42,"topic":"orders.created","recorded_at":"2026-12-01T19:56:00.123456Z","headers":{"tenant":"t1"},"payload":{"id": 7, "b":[1, 2]}}`
	if string(got) != want {
		t.Errorf("Envelope =\n%s\nwant\n%s", got, want)
	}
}

func TestEnvelopeRecordedAtHasSixDigitsEvenOnAWholeSecond(t *testing.T) {
	got, err := Envelope(Event{Sequence: 1, Topic: "t", RecordedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Payload: json.RawMessage(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), `"recorded_at":"2026-01-02T03:04:05.000000Z"`) {
		t.Errorf("Envelope = %s, want recorded_at 2026-01-02T03:04:05.000000Z", got)
	}
}

func TestEnvelopeWithoutHeadersCarriesAnEmptyObject(t *testing.T) {
	got, err := Envelope(Event{Sequence: 1, Topic: "t", Payload: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	var e struct{ Headers json.RawMessage }
	if err := json.Unmarshal(got, &e); err != nil {
		t.Fatalf("envelope is not JSON: %v", err)
	}
	if string(e.Headers) != "{}" {
		t.Errorf("headers = %s, want {}", e.Headers)
	}
}

func TestEnvelopeKeepsPayloadBytesAsWritten(t *testing.T) {
	payload := `{"html":"<b>&</b>","z":1,"a":2}`
	got, err := Envelope(Event{Sequence: 1, Topic: "t", Payload: json.RawMessage(payload)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(got), `"payload":`+payload+`}`) {
		t.Errorf("Envelope = %s, want the payload verbatim", got)
	}
}

func TestEnvelopeRefusesInvalidJSONNamingTheSequence(t *testing.T) {
	_, err := Envelope(Event{Sequence: 99, Topic: "t", Payload: json.RawMessage(`{"a":`)})
	if err == nil || !strings.Contains(err.Error(), "sequence 99") {
		t.Errorf("Envelope error = %v, want one naming sequence 99", err)
	}
	_, err = Envelope(Event{Sequence: 98, Topic: "t", Headers: json.RawMessage(`nope`), Payload: json.RawMessage(`1`)})
	if err == nil || !strings.Contains(err.Error(), "headers") {
		t.Errorf("Envelope error = %v, want one naming the headers", err)
	}
}

func TestDedupIDIsSchemaColonSequence(t *testing.T) {
	if got := DedupID("outbox", 1234567); got != "outbox:1234567" {
		t.Errorf("DedupID = %q, want outbox:1234567", got)
	}
}

func TestLimitsDefaultPerKind(t *testing.T) {
	cases := map[Kind]Limits{
		EventBridge: {Entries: 10, EntryBytes: 262144, CallBytes: 262144},
		SNS:         {Entries: 10, EntryBytes: 262144, CallBytes: 262144},
		SQS:         {Entries: 10, EntryBytes: 1048576, CallBytes: 1048576},
		Kinesis:     {Entries: 500, EntryBytes: 1048576, CallBytes: 5242880},
	}
	for k, want := range cases {
		t.Run(string(k), func(t *testing.T) {
			got, err := Limits{}.withDefaults(k)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("limits = %+v, want %+v", got, want)
			}
		})
	}
}

func TestLimitsLoweredCallBytesLowersEntryBytes(t *testing.T) {
	got, err := Limits{CallBytes: 262144}.withDefaults(SQS)
	if err != nil {
		t.Fatal(err)
	}
	if got.EntryBytes != 262144 {
		t.Errorf("EntryBytes = %d, want the call's 262144", got.EntryBytes)
	}
}

func TestLimitsRaisedEntryBytesRaisesCallBytes(t *testing.T) {
	got, err := Limits{EntryBytes: 1 << 20}.withDefaults(SNS)
	if err != nil {
		t.Fatal(err)
	}
	if got.CallBytes != 1<<20 {
		t.Errorf("CallBytes = %d, want the entry's 1048576", got.CallBytes)
	}
}

func TestLimitsAboveTheServicesCeilingAreRefused(t *testing.T) {
	for _, l := range []Limits{{Entries: 11}, {EntryBytes: 2 << 20}, {CallBytes: 2 << 20}, {Entries: -1}, {EntryBytes: 4096, CallBytes: 1024}} {
		if _, err := l.withDefaults(SQS); err == nil {
			t.Errorf("%+v accepted for SQS, want an error", l)
		}
	}
}

func TestPlanKeepsAGroupInOneLaneInOrder(t *testing.T) {
	var msgs []Message
	var ok []int
	for i := range 40 {
		msgs = append(msgs, Message{ID: fmt.Sprint(i), Group: fmt.Sprintf("g%d", i%5)})
		ok = append(ok, i)
	}
	lanes := plan(msgs, ok, 3)
	laneOf := map[string]int{}
	for l, idx := range lanes {
		if !slices.IsSorted(idx) {
			t.Errorf("lane %d is out of order: %v", l, idx)
		}
		for _, i := range idx {
			g := msgs[i].Group
			if prev, seen := laneOf[g]; seen && prev != l {
				t.Errorf("group %s is in lanes %d and %d", g, prev, l)
			}
			laneOf[g] = l
		}
	}
	if len(lanes) != 3 {
		t.Errorf("%d lanes, want 3", len(lanes))
	}
}

func TestPlanSpreadsUngroupedMessagesEvenly(t *testing.T) {
	wantLaneSizes(t, make([]Message, 30), 3, 10)
}

func TestPlanPutsTheBiggestGroupsApart(t *testing.T) {
	// Two big groups and two small ones on two lanes: the big ones must not
	// share a lane, or one lane does three quarters of the work.
	var msgs []Message
	for _, g := range []struct {
		name string
		n    int
	}{{"small1", 2}, {"big1", 20}, {"small2", 2}, {"big2", 20}} {
		for range g.n {
			msgs = append(msgs, Message{Group: g.name})
		}
	}
	wantLaneSizes(t, msgs, 2, 22)
}

// wantLaneSizes plans every one of msgs on lanes and checks that each
// lane holds size of them.
func wantLaneSizes(t *testing.T, msgs []Message, lanes, size int) {
	t.Helper()
	ok := make([]int, len(msgs))
	for i := range ok {
		ok[i] = i
	}
	for l, idx := range plan(msgs, ok, lanes) {
		if len(idx) != size {
			t.Errorf("lane %d has %d messages, want %d", l, len(idx), size)
		}
	}
}

func TestClassifyBlamesOnlyTheMessagesContent(t *testing.T) {
	cases := map[string]Status{
		"InvalidMessageContents":                   Permanent,
		"InvalidParameterValue":                    Permanent,
		"InvalidParameter":                         Permanent,
		"MalformedDetail":                          Permanent,
		"InvalidArgument":                          Permanent,
		"ValidationException":                      Permanent,
		"com.amazonaws.sqs#InvalidMessageContents": Permanent,
		"ThrottlingException":                      Transient,
		"ProvisionedThroughputExceededException":   Transient,
		"InternalFailure":                          Transient,
		"ServiceUnavailable":                       Transient,
		"KMSThrottlingException":                   Transient,
		"KMSAccessDeniedException":                 Transient,
		"AccessDeniedException":                    Transient,
		"AWS.SimpleQueueService.NonExistentQueue":  Transient,
		"NotFound":                                 Transient,
		"SomethingNew":                             Transient,
	}
	for code, want := range cases {
		if got := classify(code); got != want {
			t.Errorf("classify(%q) = %v, want %v", code, got, want)
		}
	}
}

// kinesalite never fails a record on its own (no throttling, no KMS), so
// PutRecords' per-record answers are read here from the SDK's own types.
func TestKinesisAnswersMapEachRecord(t *testing.T) {
	out := &kinesis.PutRecordsOutput{Records: []ktypes.PutRecordsResultEntry{
		{SequenceNumber: aws.String("1"), ShardId: aws.String("shardId-0")},
		{ErrorCode: aws.String("ProvisionedThroughputExceededException"), ErrorMessage: aws.String("Rate exceeded for shard")},
		{ErrorCode: aws.String("InternalFailure"), ErrorMessage: aws.String("Internal service failure.")},
		{ErrorCode: aws.String("KMSAccessDeniedException"), ErrorMessage: aws.String("denied")},
	}}
	got := kinesisAnswers(out, 5)
	want := []struct {
		ok     bool
		code   string
		status Status
	}{
		{ok: true},
		{code: "ProvisionedThroughputExceededException", status: Transient},
		{code: "InternalFailure", status: Transient},
		{code: "KMSAccessDeniedException", status: Transient},
		{code: CodeNotAcknowledged, status: Transient},
	}
	for k, w := range want {
		if got[k].ok != w.ok || got[k].code != w.code {
			t.Errorf("record %d: answer %+v, want ok=%v code=%q", k, got[k], w.ok, w.code)
		}
		if !w.ok && classify(got[k].code) != w.status {
			t.Errorf("record %d: %s classified %v, want %v", k, got[k].code, classify(got[k].code), w.status)
		}
	}
}

// moto answers MalformedDetail and InvalidArgument itself (see the
// emulator test); throttling and internal failures only AWS does.
func TestEventBridgeAnswersMapEachEntry(t *testing.T) {
	out := &eventbridge.PutEventsOutput{Entries: []ebtypes.PutEventsResultEntry{
		{EventId: aws.String("e1")},
		{ErrorCode: aws.String("ThrottlingException"), ErrorMessage: aws.String("Rate exceeded")},
		{ErrorCode: aws.String("InternalFailure"), ErrorMessage: aws.String("internal")},
		{ErrorCode: aws.String("MalformedDetail"), ErrorMessage: aws.String("Detail is malformed.")},
	}}
	got := eventBridgeAnswers(out, 4)
	if !got[0].ok {
		t.Errorf("entry 0: %+v, want ok", got[0])
	}
	for k, w := range map[int]Status{1: Transient, 2: Transient, 3: Permanent} {
		if got[k].ok || classify(got[k].code) != w {
			t.Errorf("entry %d: %+v classified %v, want %v", k, got[k], classify(got[k].code), w)
		}
	}
}

func TestSNSAnswersMatchEntriesByID(t *testing.T) {
	out := &sns.PublishBatchOutput{
		Successful: []snstypes.PublishBatchResultEntry{{Id: aws.String("2")}, {Id: aws.String("0")}},
		Failed:     []snstypes.BatchResultErrorEntry{{Id: aws.String("1"), Code: aws.String("Throttled"), Message: aws.String("slow down"), SenderFault: false}},
	}
	got := snsAnswers(out, 3)
	if !got[0].ok || !got[2].ok {
		t.Errorf("answers %+v, want entries 0 and 2 ok", got)
	}
	if got[1].ok || got[1].code != "Throttled" || classify(got[1].code) != Transient {
		t.Errorf("entry 1: %+v, want Throttled, transient", got[1])
	}
}
