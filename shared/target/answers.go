package target

import "github.com/aws/aws-sdk-go-v2/aws"

// answersByID reads a batch call whose response names its entries by Id
// (SNS PublishBatch, SQS SendMessageBatch): ok for each successful Id, the
// code and message for each failed one, not acknowledged for an entry it
// names neither way. An Id that is not one of the call's is passed over.
func answersByID[S, F any](n int, successful []S, okID func(S) *string, failed []F, failure func(F) (id, code, message *string)) []answer {
	answers := notAcknowledged(n)
	for _, s := range successful {
		if k, ok := entryIndex(deref(okID(s)), n); ok {
			answers[k] = answer{ok: true}
		}
	}
	for _, f := range failed {
		id, code, message := failure(f)
		if k, ok := entryIndex(deref(id), n); ok {
			answers[k] = answer{code: deref(code), message: deref(message)}
		}
	}
	return answers
}

// answersInOrder reads a batch call whose response holds one result per
// entry, in order (EventBridge PutEvents, Kinesis PutRecords): the code
// and message of a result with an error code, ok for one with the id the
// service gave the entry, not acknowledged for one with neither or one
// the response leaves out.
func answersInOrder[R any](n int, results []R, result func(R) (id, code, message *string)) []answer {
	answers := notAcknowledged(n)
	for k, r := range results {
		if k >= n {
			break
		}
		id, code, message := result(r)
		switch {
		case code != nil:
			answers[k] = answer{code: *code, message: deref(message)}
		case id != nil:
			answers[k] = answer{ok: true}
		}
	}
	return answers
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// fifo is whether a topic or queue is FIFO: a FIFO one holds each
// message's two ids to checkFIFO's rules, a standard one takes any.
type fifo bool

func (f fifo) check(m *Message) (string, string) {
	if f {
		return checkFIFO(m)
	}
	return "", ""
}

// ids are m's MessageGroupId and MessageDeduplicationId for a FIFO target,
// and none for a standard one, which refuses both as invalid for its type.
func (f fifo) ids(m *Message) (group, dedup *string) {
	if !f {
		return nil, nil
	}
	return aws.String(m.Group), aws.String(m.DedupID)
}
