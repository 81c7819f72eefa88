package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

// observer reads the database as an operator would, for the status line
// and the verdict. These are whole-table counts, fine for a demo's few
// thousand rows and never something the functions do.
type observer struct {
	q      store.Querier
	events string
	deliv  string
}

func newObserver(q store.Querier, schema store.Schema) *observer {
	return &observer{q: q, events: schema.Table("events"), deliv: schema.Table("deliveries")}
}

// deliveryCounts: open (pending or delivered), reset (total redeliveries),
// dead.
type deliveryCounts struct{ Open, Reset, Dead, Acked, Total int64 }

func (o *observer) deliveries(ctx context.Context) (deliveryCounts, error) {
	var c deliveryCounts
	err := o.q.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE state IN ('pending', 'delivered')),
			coalesce(sum(redeliveries), 0),
			count(*) FILTER (WHERE state = 'dead'),
			count(*) FILTER (WHERE state = 'acked'),
			count(*)
		FROM `+o.deliv).Scan(&c.Open, &c.Reset, &c.Dead, &c.Acked, &c.Total)
	if err != nil {
		return c, fmt.Errorf("count deliveries: %w", err)
	}
	return c, nil
}

// placeholderCounts are placeholders written by each path.
func (o *observer) placeholderCounts(ctx context.Context) (fill, compensate int64, err error) {
	err = o.q.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE filled_by = 'fill'),
			count(*) FILTER (WHERE filled_by = 'compensate')
		FROM `+o.events+` WHERE filled_by IS NOT NULL`).Scan(&fill, &compensate)
	if err != nil {
		err = fmt.Errorf("count placeholders: %w", err)
	}
	return fill, compensate, err
}

type placeholder struct {
	FilledBy   string
	RecordedAt time.Time
}

// placeholders returns every placeholder by sequence.
func (o *observer) placeholders(ctx context.Context) (map[int64]placeholder, error) {
	rows, err := o.q.Query(ctx, `SELECT sequence, filled_by, recorded_at FROM `+o.events+` WHERE filled_by IS NOT NULL`)
	if err != nil {
		return nil, fmt.Errorf("read placeholders: %w", err)
	}
	out := map[int64]placeholder{}
	var seq int64
	var p placeholder
	_, err = pgx.ForEachRow(rows, []any{&seq, &p.FilledBy, &p.RecordedAt}, func() error {
		out[seq] = p
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read placeholders: %w", err)
	}
	return out, nil
}

// missing counts sequences at or below head that have no row at all.
func (o *observer) missing(ctx context.Context, head int64) (int64, error) {
	var present int64
	if err := o.q.QueryRow(ctx, `SELECT count(*) FROM `+o.events+` WHERE sequence <= $1`, head).Scan(&present); err != nil {
		return 0, fmt.Errorf("count events: %w", err)
	}
	return head - present, nil
}

// ackedIDs are the acked deliveries' ids.
func (o *observer) ackedIDs(ctx context.Context) ([]int64, error) {
	rows, err := o.q.Query(ctx, `SELECT id FROM `+o.deliv+` WHERE state = 'acked' ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("acked deliveries: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}
