// Command compensate is the compensate Lambda function: it fills the
// sequences that writers report they abandoned, from SQS batches with
// partial batch responses. Wiring only; the logic is shared/compensate.
package main

import (
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/outboxkeeper/outboxkeeper/internal/boot"
	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/shared/compensate"
)

func main() {
	boot.Serve("compensate", func(in *boot.Init, cfg compensate.Config) (boot.Service, error) {
		// One AWS configuration serves SQS and, in secret or IAM mode, the
		// pool's login.
		aws := in.AWS()
		return compensate.New(in.Database(pg.Options{AWS: &aws}), cfg,
			compensate.Options{Options: in.PassOptions(), SQS: sqs.NewFromConfig(aws)})
	})
}
