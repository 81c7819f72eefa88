package fill

import (
	"testing"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/coldplan"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
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
	db, ctx := coldplan.Cold(t, coldplan.Tables{Present: present, Missing: DefaultPageSize})
	events := store.NewEvents(db.Schema)
	var stmts []coldplan.Statement
	for _, page := range []int{DefaultPageSize, 10 * DefaultPageSize} {
		stmts = append(stmts, coldplan.Statement{What: "the fill's page read", Batch: page, Run: func(q *pass.Bounded) error {
			got, err := events.PresentAfter(ctx, q, 0, page)
			if err == nil && len(got) != page {
				t.Errorf("page of %d: %d sequences", page, len(got))
			}
			return err
		}})
	}
	seqs := coldplan.Sequences(present+1, DefaultPageSize)
	stmts = append(stmts, coldplan.Statement{What: "the fill's placeholder insert", Batch: len(seqs), Run: func(q *pass.Bounded) error {
		w, err := events.InsertMissing(ctx, q, seqs, store.FilledByFill)
		if err == nil && w.N != int64(len(seqs)) {
			t.Errorf("the insert wrote %d placeholders, want %d", w.N, len(seqs))
		}
		return err
	}})
	coldplan.Statements(t, ctx, db, stmts...)
}
