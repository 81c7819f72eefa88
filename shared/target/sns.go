package target

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"
)

// snsAPI is PublishBatch to one topic.
type snsAPI struct {
	client *sns.Client
	arn    string
	fifo
}

func newSNS(cfg aws.Config, t Target) *snsAPI {
	return &snsAPI{client: sns.NewFromConfig(cfg), arn: t.ARN, fifo: fifo(t.FIFO)}
}

// size is the message's UTF-8 bytes (SNS adds the attributes, and the
// Sender sets none).
func (a *snsAPI) size(m *Message) int { return len(m.Body) }

func (a *snsAPI) put(ctx context.Context, batch []*Message) ([]answer, error) {
	entries := make([]types.PublishBatchRequestEntry, len(batch))
	for k, m := range batch {
		group, dedup := a.ids(m)
		entries[k] = types.PublishBatchRequestEntry{Id: aws.String(entryID(k)), Message: aws.String(string(m.Body)),
			MessageGroupId: group, MessageDeduplicationId: dedup}
	}
	out, err := a.client.PublishBatch(ctx, &sns.PublishBatchInput{TopicArn: aws.String(a.arn), PublishBatchRequestEntries: entries})
	if err != nil {
		return nil, err
	}
	return snsAnswers(out, len(batch)), nil
}

func snsAnswers(out *sns.PublishBatchOutput, n int) []answer {
	return answersByID(n, out.Successful, func(s types.PublishBatchResultEntry) *string { return s.Id },
		out.Failed, func(f types.BatchResultErrorEntry) (id, code, message *string) { return f.Id, f.Code, f.Message })
}
