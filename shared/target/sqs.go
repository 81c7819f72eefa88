package target

import (
	"context"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// sqsAPI is SendMessageBatch to one queue.
type sqsAPI struct {
	client *sqs.Client
	url    string
	fifo
}

func newSQS(cfg aws.Config, t Target) *sqsAPI {
	return &sqsAPI{client: sqs.NewFromConfig(cfg), url: t.URL, fifo: fifo(t.FIFO)}
}

// size is the body's UTF-8 bytes: SQS counts the body and the message
// attributes, and the Sender sets no attributes.
func (a *sqsAPI) size(m *Message) int { return len(m.Body) }

func (a *sqsAPI) put(ctx context.Context, batch []*Message) ([]answer, error) {
	entries := make([]types.SendMessageBatchRequestEntry, len(batch))
	for k, m := range batch {
		group, dedup := a.ids(m)
		entries[k] = types.SendMessageBatchRequestEntry{Id: aws.String(entryID(k)), MessageBody: aws.String(string(m.Body)),
			MessageGroupId: group, MessageDeduplicationId: dedup}
	}
	out, err := a.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(a.url), Entries: entries})
	if err != nil {
		return nil, err
	}
	return answersByID(len(batch), out.Successful, func(s types.SendMessageBatchResultEntry) *string { return s.Id },
		out.Failed, func(f types.BatchResultErrorEntry) (id, code, message *string) { return f.Id, f.Code, f.Message }), nil
}

// entryID is the batch entry Id of the call's k-th message: the caller's
// IDs may be anything, the services' batch ids may not.
func entryID(k int) string { return strconv.Itoa(k) }

func entryIndex(id string, n int) (int, bool) {
	k, err := strconv.Atoi(id)
	return k, err == nil && k >= 0 && k < n && entryID(k) == id
}

// notAcknowledged is the answer for every entry until the response names
// it: an entry it leaves out may or may not have arrived.
func notAcknowledged(n int) []answer {
	a := make([]answer, n)
	for k := range a {
		a[k] = answer{code: CodeNotAcknowledged, message: "the response named neither success nor failure for this entry"}
	}
	return a
}

// checkFIFO holds a FIFO SQS queue's or SNS topic's rules for the two ids:
// 1 to 128 characters, alphanumeric or ASCII punctuation.
func checkFIFO(m *Message) (string, string) {
	if !fifoID(m.Group) {
		return CodeInvalidGroup, "a FIFO target needs a MessageGroupId of 1 to 128 letters, digits or punctuation; got " + strconv.Quote(m.Group)
	}
	if !fifoID(m.DedupID) {
		return CodeInvalidDedupID, "a FIFO target needs a MessageDeduplicationId of 1 to 128 letters, digits or punctuation; got " + strconv.Quote(m.DedupID)
	}
	return "", ""
}

func fifoID(s string) bool {
	if len(s) < 1 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || isASCIIPunct(c)) {
			return false
		}
	}
	return true
}

func isASCIIPunct(c byte) bool {
	return '!' <= c && c <= '/' || ':' <= c && c <= '@' || '[' <= c && c <= '`' || '{' <= c && c <= '~'
}
