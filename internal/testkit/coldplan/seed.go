package coldplan

import (
	"context"
	"fmt"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

// massUpdates is how many times a seed rewrites every row: twice, as a
// relay catching up after an outage (mark delivered, then again).
const massUpdates = 2

// Deliveries fills schema's deliveries the way an outage leaves it, with
// no statistics: acked history rows first (ids 1..acked, acked a day
// ago), then stuck rows (delivered an hour ago), autovacuum off, and
// every row rewritten twice by a mass UPDATE that nothing analyses.
func Deliveries(ctx context.Context, q Querier, schema store.Schema, stuck, acked int) error {
	t := schema.Table("deliveries")
	if err := Chill(ctx, q, t); err != nil {
		return err
	}
	for _, s := range []struct {
		sql string
		n   int
	}{
		{`INSERT INTO ` + t + ` (recipient, kind, payload, state, attempts, created_at, delivered_at, acked_at)
			SELECT 'agent:' || g, 'work', '\x00'::bytea, 'acked', 1,
				now() - interval '2 days', now() - interval '2 days', now() - interval '1 day'
			FROM generate_series(1, $1) g`, acked},
		{`INSERT INTO ` + t + ` (recipient, kind, payload, state, attempts, created_at, delivered_at)
			SELECT 'agent:' || g, 'work', '\x00'::bytea, 'delivered', 1,
				now() - interval '2 hours', now() - interval '1 hour'
			FROM generate_series(1, $1) g`, stuck},
	} {
		if _, err := q.Exec(ctx, s.sql, s.n); err != nil {
			return fmt.Errorf("coldplan: seed deliveries: %w", err)
		}
	}
	return massUpdate(ctx, q, `UPDATE `+t+` SET attempts = attempts + 1`)
}

// Events fills schema's events with real events 1..present recorded a
// day ago, the fill watermark at present and the allocation head at
// present+missing (the missing sequences are above the watermark: what
// a placeholder insert fills), autovacuum off and every row rewritten
// twice, never analysed.
func Events(ctx context.Context, q Querier, schema store.Schema, present, missing int) error {
	t := schema.Table("events")
	if err := Chill(ctx, q, t, schema.Table("fill_state")); err != nil {
		return err
	}
	if _, err := q.Exec(ctx, `INSERT INTO `+t+` (sequence, xid, topic, payload, recorded_at)
		SELECT g, '3'::xid8, 'cold', '{}'::jsonb, now() - interval '1 day' FROM generate_series(1, $1) g`, present); err != nil {
		return fmt.Errorf("coldplan: seed events: %w", err)
	}
	if _, err := q.Exec(ctx, `SELECT setval('`+schema.Name()+`.events_sequence_seq', $1)`, present+missing); err != nil {
		return fmt.Errorf("coldplan: seed events: head: %w", err)
	}
	if _, err := q.Exec(ctx, `UPDATE `+schema.Table("fill_state")+` SET started = true, watermark = $1`, present); err != nil {
		return fmt.Errorf("coldplan: seed events: watermark: %w", err)
	}
	return massUpdate(ctx, q, `UPDATE `+t+` SET recorded_at = recorded_at + interval '1 second'`)
}

func massUpdate(ctx context.Context, q Querier, sql string) error {
	for range massUpdates {
		if _, err := q.Exec(ctx, sql); err != nil {
			return fmt.Errorf("coldplan: mass update: %w", err)
		}
	}
	return nil
}
