package target

import (
	"context"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// kinesisAPI is PutRecords to one stream.
type kinesisAPI struct {
	client *kinesis.Client
	arn    string
	name   string
}

func newKinesis(cfg aws.Config, t Target) *kinesisAPI {
	return &kinesisAPI{client: kinesis.NewFromConfig(cfg), arn: t.ARN, name: t.Name}
}

// size is what Kinesis counts against a record's and a call's limits: the
// data and the partition key.
func (a *kinesisAPI) size(m *Message) int { return len(m.Body) + len(m.Group) }

func (a *kinesisAPI) check(m *Message) (string, string) {
	if n := utf8.RuneCountInString(m.Group); n < 1 || n > 256 {
		return CodeInvalidGroup, "a Kinesis record needs a partition key of 1 to 256 characters"
	}
	return "", ""
}

func (a *kinesisAPI) put(ctx context.Context, batch []*Message) ([]answer, error) {
	records := make([]types.PutRecordsRequestEntry, len(batch))
	for k, m := range batch {
		records[k] = types.PutRecordsRequestEntry{Data: m.Body, PartitionKey: aws.String(m.Group)}
	}
	// The stream by ARN (AWS's advice, and needed across accounts) and by
	// name (which kinesalite needs; AWS checks the two agree).
	out, err := a.client.PutRecords(ctx, &kinesis.PutRecordsInput{StreamARN: aws.String(a.arn), StreamName: aws.String(a.name), Records: records})
	if err != nil {
		return nil, err
	}
	return kinesisAnswers(out, len(batch)), nil
}

// kinesisAnswers reads PutRecords' answer: one result per record, in
// order, with a SequenceNumber or an ErrorCode.
func kinesisAnswers(out *kinesis.PutRecordsOutput, n int) []answer {
	return answersInOrder(n, out.Records, func(r types.PutRecordsResultEntry) (id, code, message *string) {
		return r.SequenceNumber, r.ErrorCode, r.ErrorMessage
	})
}
