package outbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/outboxkeeper/outboxkeeper/shared/report"
)

// RollbackReporter sends a rollback report. *Reporter is the SQS one.
type RollbackReporter interface {
	Report(ctx context.Context, r report.Report) error
}

// SQSSender is the part of the SQS client the Reporter uses.
type SQSSender interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// Reporter sends rollback reports (DESIGN §5) to the compensate queue.
type Reporter struct {
	client       SQSSender
	queueURL     string
	maxSequences int
}

// ReporterOptions configure a Reporter.
type ReporterOptions struct {
	// MaxSequences per message; must not exceed the compensate function's
	// COMPENSATE_MAX_SEQUENCES. Default 10000.
	MaxSequences int
}

// NewReporter sends to queueURL with client.
func NewReporter(client SQSSender, queueURL string, opts ReporterOptions) (*Reporter, error) {
	if client == nil || queueURL == "" {
		return nil, errors.New("outbox: reporter needs an SQS client and a queue URL")
	}
	if opts.MaxSequences <= 0 {
		opts.MaxSequences = report.DefaultMaxSequences
	}
	return &Reporter{client: client, queueURL: queueURL, maxSequences: opts.MaxSequences}, nil
}

// NewSQSReporter builds the SQS client from the default AWS configuration
// chain. aws-sdk-go-v2 reads AWS_ENDPOINT_URL_SQS (or AWS_ENDPOINT_URL)
// there, which is how the local stack points it at the emulator.
func NewSQSReporter(ctx context.Context, queueURL string, opts ReporterOptions) (*Reporter, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("outbox: load AWS config: %w", err)
	}
	return NewReporter(sqs.NewFromConfig(cfg), queueURL, opts)
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
