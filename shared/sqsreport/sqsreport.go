// Package sqsreport sends rollback reports to the compensate function's
// SQS queue: the one part of the application library that needs the AWS
// SDK, kept apart so that importing shared/outbox pulls in none of it.
//
//	rep, err := sqsreport.NewFromEnvironment(ctx, queueURL, sqsreport.Options{})
//	ob, err := outbox.New(pool, outbox.Options{Reporter: rep})
package sqsreport

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/outboxkeeper/outboxkeeper/shared/report"
)

// SQSSender is the part of the SQS client the Reporter uses.
type SQSSender interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// Reporter sends rollback reports to the compensate queue; it is an
// outbox.RollbackReporter.
type Reporter struct {
	client       SQSSender
	queueURL     string
	maxSequences int
}

// Options configure a Reporter.
type Options struct {
	// MaxSequences per message; must not exceed the compensate function's
	// COMPENSATE_MAX_SEQUENCES. Default 10000.
	MaxSequences int
}

// New sends to queueURL with client.
func New(client SQSSender, queueURL string, opts Options) (*Reporter, error) {
	if client == nil || queueURL == "" {
		return nil, errors.New("sqsreport: a reporter needs an SQS client and a queue URL")
	}
	if opts.MaxSequences <= 0 {
		opts.MaxSequences = report.DefaultMaxSequences
	}
	return &Reporter{client: client, queueURL: queueURL, maxSequences: opts.MaxSequences}, nil
}

// NewFromEnvironment builds the SQS client from the default AWS
// configuration chain. aws-sdk-go-v2 reads AWS_ENDPOINT_URL_SQS (or
// AWS_ENDPOINT_URL) there, which is how the local stack points it at the
// emulator.
func NewFromEnvironment(ctx context.Context, queueURL string, opts Options) (*Reporter, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqsreport: load AWS config: %w", err)
	}
	return New(sqs.NewFromConfig(cfg), queueURL, opts)
}

// Report sends r, split into messages of at most MaxSequences each. Every
// chunk is attempted; the errors of failed ones are returned together.
func (r *Reporter) Report(ctx context.Context, rep report.Report) error {
	bodies, err := report.Encode(rep, r.maxSequences)
	if err != nil {
		return err
	}
	var errs []error
	for _, body := range bodies {
		if _, err := r.client.SendMessage(ctx, &sqs.SendMessageInput{
			QueueUrl:    aws.String(r.queueURL),
			MessageBody: aws.String(string(body)),
		}); err != nil {
			errs = append(errs, fmt.Errorf("send rollback report: %w", err))
		}
	}
	return errors.Join(errs...)
}
