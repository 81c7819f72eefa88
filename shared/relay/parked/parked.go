// Package parked holds the relay's own statements (relay_parked.sql: its
// parked events in <schema>.relay_parked, what its lease statements carry)
// and the operator's side of them (cmd/outboxkeeper relay ...): what each
// relay of a schema stands at, its parked events, and a request to re-send
// them. A role set up with grant_operator may run all three. It is apart
// from shared/relay so that the CLI reads a relay's state without linking
// the targets' AWS clients.
package parked

import (
	"context"
	"embed"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/sqltext"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

//go:embed relay_parked.sql
var file embed.FS

// SQL is relay_parked.sql: the relay (shared/relay) looks its statements
// up here.
var SQL = sqltext.MustParse(file, "relay_parked.sql")

// Status is one relay of a schema as `relay status` shows it.
type Status struct {
	Relay string `json:"relay"`
	// Position is nil for a relay with refused events but no position (an
	// old row, or a consumer removed by hand).
	Position *int64 `json:"position"`
	Head     int64  `json:"head"`
	// Lag is head − position (nil without a position).
	Lag *int64 `json:"lag"`
	// LastCommit is when the position last moved (or was registered).
	LastCommit *time.Time `json:"last_commit"`
	// Parked events not re-sent; Failing ones refused and still tried
	// (each holds the position back); Resend ones asked to be re-sent.
	Parked  int64 `json:"parked"`
	Failing int64 `json:"failing"`
	Resend  int64 `json:"resend"`
}

// ReadStatus reads every relay of schema, by name.
func ReadStatus(ctx context.Context, q store.Querier, schema string) ([]Status, error) {
	out, err := store.Rows(ctx, q, SQL.Statement("status", schema), nil, func(r pgx.CollectableRow) (Status, error) {
		var s Status
		err := r.Scan(&s.Relay, &s.Position, &s.Head, &s.LastCommit, &s.Parked, &s.Failing, &s.Resend)
		if s.Position != nil {
			lag := s.Head - *s.Position
			s.Lag = &lag
		}
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the relays' status: %w", err)
	}
	return out, nil
}

// Parked is one row of relay_parked.
type Parked struct {
	Relay             string     `json:"relay"`
	Sequence          int64      `json:"sequence"`
	Topic             string     `json:"topic"`
	Attempts          int        `json:"attempts"`
	Error             string     `json:"error"`
	FirstFailedAt     time.Time  `json:"first_failed_at"`
	LastFailedAt      time.Time  `json:"last_failed_at"`
	ParkedAt          *time.Time `json:"parked_at"`
	ResendRequestedAt *time.Time `json:"resend_requested_at"`
	ResentAt          *time.Time `json:"resent_at"`
}

// State is the row's state in words: failing (still tried), parked,
// resend (asked to be re-sent), resent.
func (p Parked) State() string {
	switch {
	case p.ResentAt != nil:
		return "resent"
	case p.ResendRequestedAt != nil:
		return "resend"
	case p.ParkedAt != nil:
		return "parked"
	}
	return "failing"
}

// ListParked lists the parked events of relay (every relay when empty);
// all adds those re-sent and those still tried.
func ListParked(ctx context.Context, q store.Querier, schema, relay string, all bool, limit int) ([]Parked, error) {
	out, err := store.Rows(ctx, q, SQL.Statement("list", schema),
		pgx.StrictNamedArgs{"relay": nullIfEmpty(relay), "all": all, "limit": limit}, pgx.RowToStructByPos[Parked])
	if err != nil {
		return nil, fmt.Errorf("list parked events: %w", err)
	}
	return out, nil
}

// Requested is a parked event marked for re-sending.
type Requested struct {
	Relay    string `json:"relay"`
	Sequence int64  `json:"sequence"`
}

// RequestResend marks parked events of relay (every relay when empty) to
// be re-sent at the relay's next pass: those of sequences, or all of them.
// It answers the events it marked; a sequence not parked (or re-sent
// already) is not among them.
func RequestResend(ctx context.Context, q store.Querier, schema, relay string, sequences []int64, all bool) ([]Requested, error) {
	if sequences == nil {
		sequences = []int64{}
	}
	out, err := store.Rows(ctx, q, SQL.Statement("request_resend", schema),
		pgx.StrictNamedArgs{"relay": nullIfEmpty(relay), "all": all, "sequences": sequences}, pgx.RowToStructByPos[Requested])
	if err != nil {
		return nil, fmt.Errorf("request the re-send of parked events: %w", err)
	}
	return out, nil
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
