package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/shared/sqsreport"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
	"github.com/outboxkeeper/outboxkeeper/shared/report"
)

// sqsReporter returns a Reporter sending to a fresh fauxqs queue, and a
// function that collects the reports that arrived there.
func sqsReporter(t *testing.T, maxSequences int) (*sqsreport.Reporter, func(want int) []report.Report) {
	t.Helper()
	client := sqstest.Client(t)
	url := sqstest.NewQueue(t, client, "reports", nil)
	r, err := sqsreport.New(client, url, sqsreport.Options{MaxSequences: maxSequences})
	if err != nil {
		t.Fatal(err)
	}
	return r, func(want int) []report.Report {
		wait := 5 * time.Second
		if want == 0 {
			wait = 1500 * time.Millisecond
		}
		msgs := sqstest.Drain(t, client, url, max(want, 1), wait)
		var out []report.Report
		for _, m := range msgs {
			rep, err := report.Parse([]byte(*m.Body), report.DefaultMaxSequences)
			if err != nil {
				t.Fatalf("body %q: %v", *m.Body, err)
			}
			out = append(out, rep)
		}
		return out
	}
}

// wantNoReport fails the test if a report arrives: a committed
// transaction sends none.
func wantNoReport(t *testing.T, received func(want int) []report.Report) {
	t.Helper()
	if extra := received(0); len(extra) != 0 {
		t.Errorf("a committed transaction reported %+v", extra)
	}
}

func TestReporterDeliversIntactAndChunks(t *testing.T) {
	t.Parallel()
	reporter, received := sqsReporter(t, 3)
	seqs := []int64{11, 12, 13, 14, 15, 16, 17}
	if err := reporter.Report(context.Background(), report.Report{XID: 7305, HasXID: true, Sequences: seqs}); err != nil {
		t.Fatal(err)
	}
	got := received(3)
	if len(got) != 3 {
		t.Fatalf("%d messages, want 3 chunks of at most 3", len(got))
	}
	var all []int64
	for _, r := range got {
		if !r.HasXID || r.XID != 7305 {
			t.Fatalf("chunk lost its xid: %+v", r)
		}
		if len(r.Sequences) > 3 {
			t.Fatalf("chunk of %d sequences exceeds the limit", len(r.Sequences))
		}
		all = append(all, r.Sequences...)
	}
	slices.Sort(all)
	if !slices.Equal(all, seqs) {
		t.Fatalf("sequences arrived as %v, want %v", all, seqs)
	}
}

func TestReporterBodyIsTheDesignShape(t *testing.T) {
	t.Parallel()
	client := sqstest.Client(t)
	url := sqstest.NewQueue(t, client, "shape", nil)
	r, _ := sqsreport.New(client, url, sqsreport.Options{})
	if err := r.Report(context.Background(), report.Report{XID: 42, HasXID: true, Sequences: []int64{1201, 1202, 1207}}); err != nil {
		t.Fatal(err)
	}
	msgs := sqstest.Drain(t, client, url, 1, 5*time.Second)
	if len(msgs) != 1 {
		t.Fatalf("%d messages", len(msgs))
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(*msgs[0].Body), &body); err != nil {
		t.Fatal(err)
	}
	if body["v"] != 1.0 || body["xid"] != "42" || len(body["sequences"].([]any)) != 3 {
		t.Fatalf("body = %s", *msgs[0].Body)
	}
}

// writerXID reads the xid the transaction's rows were recorded with.
func recordedXIDs(t *testing.T, db *testdb.DB) map[int64]uint64 {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT sequence, xid::text FROM outbox.events WHERE xid IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]uint64{}
	for rows.Next() {
		var s int64
		var x string
		_ = rows.Scan(&s, &x)
		out[s], _ = strconv.ParseUint(x, 10, 64)
	}
	return out
}

func TestInTxReports(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	cases := []struct {
		name string
		// run calls InTx in its own way and returns what InTx returned.
		run        func(ob *outbox.Outbox) error
		wantErr    error
		wantReport []int64
	}{
		{
			name: "error from fn",
			run: func(ob *outbox.Outbox) error {
				return ob.InTx(context.Background(), func(ctx context.Context, tx *outbox.Tx) error {
					if _, err := tx.Publish(ctx, "t", 1, 2); err != nil {
						return err
					}
					return boom
				})
			},
			wantErr: boom, wantReport: []int64{1, 2},
		},
		{
			name: "panic in fn",
			run: func(ob *outbox.Outbox) (err error) {
				defer func() {
					if p := recover(); p != nil {
						err = errors.New("panicked")
					}
				}()
				return ob.InTx(context.Background(), func(ctx context.Context, tx *outbox.Tx) error {
					if _, err := tx.Publish(ctx, "t", 1); err != nil {
						return err
					}
					panic("kaboom")
				})
			},
			wantErr: errors.New("panicked"), wantReport: []int64{1},
		},
		{
			name: "commit fails",
			run: func(ob *outbox.Outbox) error {
				return ob.InTx(context.Background(), func(ctx context.Context, tx *outbox.Tx) error {
					if _, err := tx.Publish(ctx, "t", 1, 2, 3); err != nil {
						return err
					}
					// A deferred unique constraint is checked at COMMIT,
					// so the commit itself fails.
					_, err := tx.Exec(ctx, `CREATE TEMP TABLE d (x int UNIQUE DEFERRABLE INITIALLY DEFERRED) ON COMMIT DROP;
						INSERT INTO d VALUES (1), (1)`)
					return err
				})
			},
			wantErr: errors.New("commit"), wantReport: []int64{1, 2, 3},
		},
		{
			name: "success reports nothing",
			run: func(ob *outbox.Outbox) error {
				return ob.InTx(context.Background(), func(ctx context.Context, tx *outbox.Tx) error {
					_, err := tx.Publish(ctx, "t", 1)
					return err
				})
			},
		},
		{
			name: "savepoint rollback inside a committed transaction",
			run: func(ob *outbox.Outbox) error {
				return ob.InTx(context.Background(), func(ctx context.Context, tx *outbox.Tx) error {
					if _, err := tx.Publish(ctx, "t", 1); err != nil { // 1 commits
						return err
					}
					_ = tx.Savepoint(ctx, func(ctx context.Context, sp *outbox.Tx) error {
						if _, err := sp.Publish(ctx, "t", 2, 3); err != nil { // 2, 3 roll back
							return err
						}
						return boom
					})
					_, err := tx.Publish(ctx, "t", 4) // 4 commits
					return err
				})
			},
			wantReport: []int64{2, 3},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t)
			reporter, received := sqsReporter(t, 0)
			ob := newOutbox(t, db, outbox.Options{Reporter: reporter})
			err := c.run(ob)
			switch {
			case c.wantErr == nil && err != nil:
				t.Fatalf("InTx: %v", err)
			case c.wantErr != nil && err == nil:
				t.Fatalf("InTx succeeded, want %v", c.wantErr)
			case c.wantErr == boom && !errors.Is(err, boom):
				t.Fatalf("the original error was hidden: %v", err)
			}
			got := received(len(c.wantReport))
			if c.wantReport == nil {
				if len(got) != 0 {
					t.Fatalf("reported %+v, want nothing", got)
				}
				return
			}
			if len(got) != 1 || !slices.Equal(got[0].Sequences, c.wantReport) || !got[0].HasXID || got[0].XID == 0 {
				t.Fatalf("reported %+v, want one report of %v with an xid", got, c.wantReport)
			}
			// In the committed case the xid must be the committed writer's.
			for seq, xid := range recordedXIDs(t, db) {
				if xid != got[0].XID {
					t.Fatalf("row %d has xid %d, report says %d", seq, xid, got[0].XID)
				}
			}
		})
	}
}

// failingReporter stands in for an SQS outage (pure logic: how InTx treats
// a failed report).
type failingReporter struct{}

func (failingReporter) Report(context.Context, report.Report) error { return errors.New("sqs down") }

func TestFailedReportNeverHidesTheOriginalError(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ob := newOutbox(t, db, outbox.Options{Reporter: failingReporter{}})
	boom := errors.New("boom")
	err := ob.InTx(context.Background(), func(ctx context.Context, tx *outbox.Tx) error {
		if _, err := tx.Publish(ctx, "t", 1); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("original error hidden: %v", err)
	}
	if err.Error() == boom.Error() {
		t.Fatalf("the failed report was swallowed: %v", err)
	}
}

// TestCommittedTxNeverReportsFailure: a transaction that committed returns
// nil even when reporting its savepoint rollbacks fails, or a caller that
// retries on error would publish its events twice.
func TestCommittedTxNeverReportsFailure(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ob := newOutbox(t, db, outbox.Options{Reporter: failingReporter{}})
	err := ob.InTx(context.Background(), func(ctx context.Context, tx *outbox.Tx) error {
		if _, err := tx.Publish(ctx, "kept", 1); err != nil {
			return err
		}
		_ = tx.Savepoint(ctx, func(ctx context.Context, sp *outbox.Tx) error {
			if _, err := sp.Publish(ctx, "dropped", 2); err != nil {
				return err
			}
			return errors.New("undo this part")
		})
		return nil
	})
	if err != nil {
		t.Fatalf("InTx returned %v for a committed transaction", err)
	}
	var kept int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox.events WHERE topic = 'kept'`).Scan(&kept); err != nil || kept != 1 {
		t.Fatalf("committed rows: %d, %v", kept, err)
	}
}
