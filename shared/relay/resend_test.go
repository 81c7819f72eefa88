package relay

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/outboxkeeper/outboxkeeper/shared/target"
)

// A due event that prune removed is refused at once as gone, and one whose
// envelope cannot be built as an invalid envelope; only the others become
// messages, each with its sequence.
func TestResendMessagesRefusesWhatCannotBeSentAtOnce(t *testing.T) {
	due := []dueResend{{Sequence: 3, Present: true, Topic: "a"}, {Sequence: 5}, {Sequence: 7, Present: true, Topic: "bad"}}
	message := func(e event) (target.Message, error) {
		if e.Topic == "bad" {
			return target.Message{}, errors.New("no envelope")
		}
		return target.Message{ID: e.Topic}, nil
	}
	var r resends
	msgs, of := resendMessages(due, message, &r)
	if !slices.Equal(of, []int64{3}) {
		t.Errorf("messages of sequences %v, want [3]", of)
	}
	if len(msgs) != 1 || msgs[0].ID != "a" {
		t.Errorf("messages %+v, want the one of sequence 3", msgs)
	}
	if !slices.Equal(r.seqs, []int64{5, 7}) {
		t.Errorf("settled %v, want [5 7]", r.seqs)
	}
	if slices.Contains(r.sentOK, true) {
		t.Errorf("sent %v, want both refused", r.sentOK)
	}
	if !strings.Contains(r.errs[0], CodeGone) {
		t.Errorf("the pruned event's error %q, want %s", r.errs[0], CodeGone)
	}
	if !strings.Contains(r.errs[1], CodeInvalidEnvelope) {
		t.Errorf("the bad envelope's error %q, want %s", r.errs[1], CodeInvalidEnvelope)
	}
}

// What the target accepted is settled sent and what it refused refused
// with its word; what failed transiently is not settled, so it stays
// requested for the next pass.
func TestResendSettlesLeaveTransientFailuresRequested(t *testing.T) {
	var r resends
	r.settleSent([]int64{1, 2, 3}, []target.Outcome{
		{Status: target.Sent}, {Status: target.Transient, Code: "Throttled"}, {Status: target.Permanent, Code: "TooBig", Message: "too big"},
	})
	if !slices.Equal(r.seqs, []int64{1, 3}) {
		t.Errorf("settled %v, want [1 3]", r.seqs)
	}
	if !slices.Equal(r.sentOK, []bool{true, false}) {
		t.Errorf("sent %v, want [true false]", r.sentOK)
	}
	if !strings.Contains(r.errs[1], "TooBig") {
		t.Errorf("the refusal's error %q, want the target's code", r.errs[1])
	}
	resent, refused := r.counts()
	if resent != 1 {
		t.Errorf("resent = %d, want 1", resent)
	}
	if refused != 1 {
		t.Errorf("refused = %d, want 1", refused)
	}
}
