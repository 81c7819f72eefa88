package fill

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/coldplan"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
)

// TestPageReadAndInsertAreLinearOnColdStatistics: the fill's page read and
// its placeholder insert do work bounded by their batch in every node, on
// an events table fresh from mass UPDATEs that nothing analysed: a range
// scan of the primary key from the cursor, and one primary key probe per
// sequence written. The page is asked for at both of the fill's sizes that
// matter: its default and ten times that, on a table only ten times the
// smaller (where a planner that guesses may read it all).
func TestPageReadAndInsertAreLinearOnColdStatistics(t *testing.T) {
	t.Parallel()
	const present = 10 * DefaultPageSize
	db := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := coldplan.Events(ctx, db.Pool, db.Schema, present, DefaultPageSize); err != nil {
		t.Fatal(err)
	}
	if err := coldplan.NeverAnalysed(ctx, db.Pool, db.Schema.Table("events")); err != nil {
		t.Fatal(err)
	}
	events := store.NewEvents(db.Schema)
	for _, page := range []int{DefaultPageSize, 10 * DefaultPageSize} {
		var got []int64
		coldplan.Linear(t, ctx, db.DirectURL, "the fill's page read", page, func(conn *pgx.Conn) (err error) {
			got, err = events.PresentAfter(ctx, coldplan.Bounded(conn), 0, page)
			return err
		})
		if len(got) != page {
			t.Errorf("page of %d: %d sequences", page, len(got))
		}
	}
	seqs := make([]int64, DefaultPageSize)
	for i := range seqs {
		seqs[i] = present + 1 + int64(i)
	}
	var w store.Written
	coldplan.Linear(t, ctx, db.DirectURL, "the fill's placeholder insert", len(seqs), func(conn *pgx.Conn) (err error) {
		w, err = events.InsertMissing(ctx, coldplan.Bounded(conn), seqs, store.FilledByFill)
		return err
	})
	if w.N != int64(len(seqs)) {
		t.Errorf("the insert wrote %d placeholders, want %d", w.N, len(seqs))
	}
}
