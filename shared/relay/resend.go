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
	rows, err := q.Query(ctx, st.s.sql.resendDue, pgx.NamedArgs{"relay": st.s.cfg.Name, "limit": maxResend})
	if err != nil {
		return fmt.Errorf("read the parked events to re-send: %w", err)
	}
	type due struct {
		Sequence   int64
		Present    bool
		Topic      string
		Payload    json.RawMessage
		Headers    json.RawMessage
		RecordedAt time.Time
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[due])
	if err != nil {
		return fmt.Errorf("read the parked events to re-send: %w", err)
	}
	if len(got) == 0 {
		return nil
	}
	var (
		seqs   []int64
		sentOK []bool
		errs   []string
		msgs   []target.Message
		of     []int64
	)
	settleOne := func(seq int64, ok bool, why string) {
		seqs, sentOK, errs = append(seqs, seq), append(sentOK, ok), append(errs, why)
	}
	for _, d := range got {
		if !d.Present {
			settleOne(d.Sequence, false, errorText(CodeGone, "the event is no longer in events (pruned): nothing to re-send"))
			continue
		}
		m, err := st.s.message(event{Sequence: d.Sequence, Topic: d.Topic, Payload: d.Payload, Headers: d.Headers, RecordedAt: d.RecordedAt})
		if err != nil {
			settleOne(d.Sequence, false, errorText(CodeInvalidEnvelope, err.Error()))
			continue
		}
		msgs, of = append(msgs, m), append(of, d.Sequence)
	}
	if len(msgs) > 0 {
		sctx, cancel := context.WithDeadline(ctx, earliest(sendBy, st.s.kit.Now().Add(sendTimeout)))
		r := st.s.sender.Send(sctx, msgs)
		cancel()
		st.res.Calls += r.Calls
		for k, o := range r.Outcomes {
			switch o.Status {
			case target.Sent:
				settleOne(of[k], true, "")
			case target.Permanent:
				settleOne(of[k], false, errorText(o.Code, o.Message))
			}
		}
	}
	if len(seqs) == 0 {
		return nil
	}
	if _, err := q.Exec(ctx, st.s.sql.resendDone, pgx.NamedArgs{
		"relay": st.s.cfg.Name, "sequences": seqs, "sent": sentOK, "errors": errs,
	}); err != nil {
		return fmt.Errorf("record the parked events re-sent: %w", err)
	}
	var resent, refused int64
	for _, ok := range sentOK {
		if ok {
			resent++
		} else {
			refused++
		}
	}
	st.res.Resent += resent
	st.s.kit.Logger.LogAttrs(ctx, slog.LevelWarn, "relay: re-sent parked events, out of order (after events sent past them)",
		slog.String("relay", st.s.cfg.Name), slog.Int64("resent", resent), slog.Int64("refused_again", refused),
		slog.Int64("first", seqs[0]), slog.Int64("last", seqs[len(seqs)-1]))
	return nil
}
