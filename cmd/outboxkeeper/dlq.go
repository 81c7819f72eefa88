package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxkeeper/outboxkeeper/shared/report"
)

var dlqCommand = &command{
	name:    "dlq",
	summary: "the rollback reports in the dead-letter queue: list, redrive",
	help: `Rollback reports reach the DLQ two ways:
  - compensate found them bad input (a malformed body, a sequence above the
    allocation head, an xid in the future): it sends them there at once with a
    message attribute "error" saying why. Fix the sender; the fill function fills
    any real gap on its own, so these can be deleted once read.
  - compensate failed 5 receives in a row (the database was down or out of
    reach, compensate was paused too long): no "error" attribute. Once the
    cause is fixed, redrive them; replaying a report is idempotent.
Neither affects soundness: a report is only ever a shortcut the fill would
otherwise take on its own after its grace and proof.`,
	sub: []*command{dlqList, dlqRedrive},
}

// The DLQ's messages, as seen by one command.
type dlqMessage struct {
	MessageID    string     `json:"message_id"`
	SentAt       *time.Time `json:"sent_at"`
	ReceiveCount int        `json:"receive_count"`
	// Error is compensate's "error" attribute: why it called the report
	// bad input. Empty for one dead-lettered after its receives.
	Error string `json:"error"`
	// Verdict: "redrive" (parses, no error attribute), "rejected"
	// (compensate's error attribute: judged against the database, which
	// the parser cannot check), "invalid" (does not parse; Invalid says
	// why).
	Verdict string `json:"verdict"`
	Invalid string `json:"invalid,omitempty"`
	Body    string `json:"body"`

	receipt string
}

// Verdicts of one DLQ message.
const (
	verdictRedrive  = "redrive"
	verdictRejected = "rejected"
	verdictInvalid  = "invalid"
)

// judge decides a message with the parser compensate uses.
func judge(m *dlqMessage, maxSequences int) {
	_, err := report.Parse([]byte(m.Body), maxSequences)
	var inv *report.InvalidError
	switch {
	case errors.As(err, &inv):
		m.Verdict, m.Invalid = verdictInvalid, inv.Reason
	case err != nil:
		m.Verdict, m.Invalid = verdictInvalid, err.Error()
	case m.Error != "":
		m.Verdict = verdictRejected
	default:
		m.Verdict = verdictRedrive
	}
}

type dlqFlags struct {
	queueFlags
	json         bool
	limit        int
	maxSequences int
}

func addDLQFlags(fs *flag.FlagSet, f *dlqFlags, limit int) {
	addQueueFlags(fs, &f.queueFlags)
	fs.BoolVar(&f.json, "json", false, "print JSON for scripts instead of tables")
	fs.IntVar(&f.limit, "limit", limit, "at most this many messages")
	fs.IntVar(&f.maxSequences, "max-sequences", report.DefaultMaxSequences, "the sequences a report may carry, as COMPENSATE_MAX_SEQUENCES")
}

// holdFor is how long the messages read stay invisible while a command
// works on them; each one left in place is made visible again at the end.
const holdFor = 60 * time.Second

// receiveAll reads up to limit messages of url, each once, holding them
// invisible; SQS has no peek.
func receiveAll(ctx context.Context, c sqsAPI, url string, limit, maxSequences int) ([]*dlqMessage, error) {
	var out []*dlqMessage
	seen := map[string]bool{}
	for len(out) < limit {
		res, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(url),
			MaxNumberOfMessages:         int32(min(10, limit-len(out))),
			VisibilityTimeout:           int32(holdFor.Seconds()),
			WaitTimeSeconds:             1,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			return out, fmt.Errorf("receive from %s: %w", url, err)
		}
		if len(res.Messages) == 0 {
			return out, nil
		}
		for _, msg := range res.Messages {
			id := aws.ToString(msg.MessageId)
			if seen[id] {
				// Held longer than holdFor: it came round again.
				return out, nil
			}
			seen[id] = true
			m := &dlqMessage{MessageID: id, Body: aws.ToString(msg.Body), receipt: aws.ToString(msg.ReceiptHandle)}
			if a, ok := msg.MessageAttributes["error"]; ok {
				m.Error = aws.ToString(a.StringValue)
			}
			m.ReceiveCount, _ = strconv.Atoi(msg.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
			if ms, err := strconv.ParseInt(msg.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil {
				t := time.UnixMilli(ms).UTC()
				m.SentAt = &t
			}
			judge(m, maxSequences)
			out = append(out, m)
		}
	}
	return out, nil
}

// release makes messages visible again at once: left where they were.
func release(ctx context.Context, c sqsAPI, url string, ms []*dlqMessage) error {
	var errs []error
	for _, m := range ms {
		if _, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(url), ReceiptHandle: aws.String(m.receipt), VisibilityTimeout: 0,
		}); err != nil {
			errs = append(errs, fmt.Errorf("release %s: %w", m.MessageID, err))
		}
	}
	return errors.Join(errs...)
}

func dlqRows(ms []*dlqMessage) [][]string {
	var rows [][]string
	for _, m := range ms {
		why := m.Error
		if m.Verdict == verdictInvalid {
			why = m.Invalid
		}
		body := m.Body
		if len(body) > 60 {
			body = body[:60] + "…"
		}
		rows = append(rows, []string{m.MessageID, stamp(m.SentAt), strconv.Itoa(m.ReceiveCount), m.Verdict, orDash(oneLine(why)), oneLine(body)})
	}
	return rows
}

// receivedNote closes a listing: what reading the messages did to them.
const receivedNote = "note: SQS has no peek, so listing received each message once: its receive count went up by one (RECEIVES includes it); each is visible again"

var dlqHeader = []string{"MESSAGE", "SENT", "RECEIVES", "VERDICT", "WHY", "BODY"}

var dlqList = &command{
	name:    "list",
	summary: "the DLQ's messages with their error attribute and the parser's verdict",
	help: `Lists the DLQ's messages: when each was sent, how often received, compensate's
"error" attribute, and what redrive would do with it:
  redrive   a valid report without an error attribute (its receives ran out)
  rejected  compensate called it bad input (the error attribute says why)
  invalid   it does not parse as a rollback report (the reason is shown)
SQS has no peek: listing receives each message, which hides it for a minute
(list makes each one visible again before it exits) and raises its receive
count by one; RECEIVES includes this listing's. The template's DLQ has no
redrive policy of its own, so nothing moves or expires because of it.

` + queueHelp,
	flags: func(fs *flag.FlagSet) any { f := &dlqFlags{}; addDLQFlags(fs, f, 100); return f },
	run: func(ctx context.Context, e *env, opts any) error {
		f := opts.(*dlqFlags)
		_, dlq := f.urls(e)
		if dlq == "" {
			return usagef("which DLQ? --dlq-url or %s", dlqURLVar)
		}
		c, err := newSQS(ctx)
		if err != nil {
			return err
		}
		ms, err := receiveAll(ctx, c, dlq, f.limit, f.maxSequences)
		if rerr := release(context.WithoutCancel(ctx), c, dlq, ms); err == nil {
			err = rerr
		}
		if err != nil {
			return err
		}
		if f.json {
			if len(ms) > 0 {
				fmt.Fprintln(e.stderr, receivedNote)
			}
			return printJSON(e.stdout, listed(ms))
		}
		if len(ms) == 0 {
			_, err := fmt.Fprintln(e.stdout, "the DLQ is empty")
			return err
		}
		if err := table(e.stdout, dlqHeader, dlqRows(ms)); err != nil {
			return err
		}
		_, err = fmt.Fprintln(e.stdout, "\n"+receivedNote)
		return err
	},
}

type dlqRedriveFlags struct {
	dlqFlags
	dryRun bool
}

var dlqRedrive = &command{
	name:    "redrive",
	summary: "send the DLQ's valid reports back to the report queue",
	help: `Sends every valid report in the DLQ (verdict "redrive" in 'dlq list': it parses
with the parser compensate uses, and compensate did not reject it) back to the
rollback report queue, body unchanged, and deletes it from the DLQ. Bad input
(rejected or invalid) stays where it is, named. Replaying a report is
idempotent: compensate fills only what is still missing, ON CONFLICT DO NOTHING.
--dry-run says what it would do and moves nothing.

Exit status 3 when bad input was left in the DLQ.

` + queueHelp,
	flags: func(fs *flag.FlagSet) any {
		f := &dlqRedriveFlags{}
		addDLQFlags(fs, &f.dlqFlags, 10000)
		fs.BoolVar(&f.dryRun, "dry-run", false, "show what would move, move nothing")
		return f
	},
	run: func(ctx context.Context, e *env, opts any) error {
		f := opts.(*dlqRedriveFlags)
		queue, dlq := f.urls(e)
		if dlq == "" || queue == "" {
			return usagef("redrive needs both queues: --queue-url and --dlq-url, or %s and %s", queueURLVar, dlqURLVar)
		}
		c, err := newSQS(ctx)
		if err != nil {
			return err
		}
		ms, err := receiveAll(ctx, c, dlq, f.limit, f.maxSequences)
		var moved, left []*dlqMessage
		// Send first, then delete: a failure in between leaves a duplicate
		// in the queue, which compensate absorbs, never a lost report.
		for _, m := range ms {
			if err != nil || f.dryRun || m.Verdict != verdictRedrive {
				left = append(left, m)
				continue
			}
			if _, serr := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(queue), MessageBody: aws.String(m.Body)}); serr != nil {
				err = fmt.Errorf("send %s to %s: %w", m.MessageID, queue, serr)
				left = append(left, m)
				continue
			}
			if _, derr := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(dlq), ReceiptHandle: aws.String(m.receipt)}); derr != nil {
				err = fmt.Errorf("sent %s, but could not delete it from the DLQ (it will come round again; replaying is idempotent): %w", m.MessageID, derr)
			}
			moved = append(moved, m)
		}
		if rerr := release(context.WithoutCancel(ctx), c, dlq, left); err == nil {
			err = rerr
		}
		if err != nil {
			return err
		}
		var bad, sendable []*dlqMessage
		for _, m := range ms {
			if m.Verdict == verdictRedrive {
				sendable = append(sendable, m)
			} else {
				bad = append(bad, m)
			}
		}
		if f.json {
			sent := len(moved)
			if f.dryRun {
				sent = len(sendable)
			}
			if err := printJSON(e.stdout, map[string]any{"dry_run": f.dryRun, "sent": sent, "left_bad": len(bad), "messages": listed(ms)}); err != nil {
				return err
			}
		} else {
			verb, sent := "sent", len(moved)
			if f.dryRun {
				verb, sent = "would send", len(sendable)
			}
			fmt.Fprintf(e.stdout, "%s %d %s back to the report queue; left %d bad %s in the DLQ\n",
				verb, sent, plural(int64(sent), "report", "reports"), len(bad), plural(int64(len(bad)), "message", "messages"))
			if len(bad) > 0 {
				if err := table(e.stdout, dlqHeader, dlqRows(bad)); err != nil {
					return err
				}
			}
		}
		if len(bad) > 0 {
			return errAttention
		}
		return nil
	},
}
