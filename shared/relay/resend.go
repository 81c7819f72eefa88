package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/target"
)

// maxResend is the most parked events one pass re-sends; the rest wait for
// the next pass.
const maxResend = 1000

// CodeGone is the refusal of a re-send whose event is no longer in events
// (prune deleted it).
const CodeGone = "EventGone"

// resend sends the parked events an operator asked to have re-sent
// (`outboxkeeper relay parked resend`), out of order: after events the
// stream sent past them. Each keeps its dedup id. What the target accepts
// is marked re-sent; what it refuses for itself keeps its place with the
// new error and its request cleared; what failed transiently stays
// requested, for the next pass.
func (st *stream) resend(ctx context.Context, q store.Querier, sendBy time.Time) error {
	due, err := st.readResendDue(ctx, q)
	if err != nil || len(due) == 0 {
		return err
	}
	var r resends
	msgs, of := resendMessages(due, st.s.message, &r)
	if len(msgs) > 0 {
		sctx, cancel := context.WithDeadline(ctx, earliest(sendBy, st.s.kit.Now().Add(sendTimeout)))
		sent := st.s.sender.Send(sctx, msgs)
		cancel()
		st.res.Calls += sent.Calls
		r.settleSent(of, sent.Outcomes)
	}
	if len(r.seqs) == 0 {
		return nil
	}
	if _, err := q.Exec(ctx, st.s.sql.resendDone, pgx.NamedArgs{
		"relay": st.s.cfg.Name, "sequences": r.seqs, "sent": r.sentOK, "errors": r.errs,
	}); err != nil {
		return fmt.Errorf("record the parked events re-sent: %w", err)
	}
	resent, refused := r.counts()
	st.res.Resent += resent
	st.s.kit.Logger.LogAttrs(ctx, slog.LevelWarn, "relay: re-sent parked events, out of order (after events sent past them)",
		slog.String("relay", st.s.cfg.Name), slog.Int64("resent", resent), slog.Int64("refused_again", refused),
		slog.Int64("first", r.seqs[0]), slog.Int64("last", r.seqs[len(r.seqs)-1]))
	return nil
}

// dueResend is one parked event an operator asked to have re-sent, with
// the event as events still holds it (Present false: pruned).
type dueResend struct {
	Sequence   int64
	Present    bool
	Topic      string
	Payload    json.RawMessage
	Headers    json.RawMessage
	RecordedAt time.Time
}

// readResendDue is at most maxResend of the relay's requested re-sends.
func (st *stream) readResendDue(ctx context.Context, q store.Querier) ([]dueResend, error) {
	rows, err := q.Query(ctx, st.s.sql.resendDue, pgx.NamedArgs{"relay": st.s.cfg.Name, "limit": maxResend})
	if err != nil {
		return nil, fmt.Errorf("read the parked events to re-send: %w", err)
	}
	due, err := pgx.CollectRows(rows, pgx.RowToStructByPos[dueResend])
	if err != nil {
		return nil, fmt.Errorf("read the parked events to re-send: %w", err)
	}
	return due, nil
}

// resendMessages is the message of every due event that can still be
// sent, and of its sequence; an event pruned away or whose envelope
// cannot be built is settled refused in r at once.
func resendMessages(due []dueResend, message func(event) (target.Message, error), r *resends) (msgs []target.Message, of []int64) {
	for _, d := range due {
		if !d.Present {
			r.settle(d.Sequence, false, errorText(CodeGone, "the event is no longer in events (pruned): nothing to re-send"))
			continue
		}
		m, err := message(event{Sequence: d.Sequence, Topic: d.Topic, Payload: d.Payload, Headers: d.Headers, RecordedAt: d.RecordedAt})
		if err != nil {
			r.settle(d.Sequence, false, errorText(CodeInvalidEnvelope, err.Error()))
			continue
		}
		msgs, of = append(msgs, m), append(of, d.Sequence)
	}
	return msgs, of
}

// resends is what one pass's re-sends came to, as resend_done's three
// arrays: a sequence, whether it was sent, and the target's refusal.
type resends struct {
	seqs   []int64
	sentOK []bool
	errs   []string
}

func (r *resends) settle(seq int64, ok bool, why string) {
	r.seqs, r.sentOK, r.errs = append(r.seqs, seq), append(r.sentOK, ok), append(r.errs, why)
}

// settleSent settles the k-th message sent as of[k] by its outcome; one
// that failed transiently is left out, so it stays requested.
func (r *resends) settleSent(of []int64, outcomes []target.Outcome) {
	for k, o := range outcomes {
		switch o.Status {
		case target.Sent:
			r.settle(of[k], true, "")
		case target.Permanent:
			r.settle(of[k], false, errorText(o.Code, o.Message))
		}
	}
}

func (r *resends) counts() (resent, refused int64) {
	for _, ok := range r.sentOK {
		if ok {
			resent++
		} else {
			refused++
		}
	}
	return resent, refused
}
