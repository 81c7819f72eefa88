package migrations_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	migrate "github.com/outboxkeeper/outboxkeeper/shared/migrations"
)

// legacyOutbox is the starting point of an adoption: an application's
// bigserial outbox table, polled by its own relay.
const legacyOutbox = `CREATE TABLE public.orders_outbox (
	id           bigserial PRIMARY KEY,
	topic        text NOT NULL,
	payload      jsonb NOT NULL,
	created_at   timestamptz NOT NULL DEFAULT now(),
	processed_at timestamptz)`

// legacyInsert is the application's INSERT, the same text before, during
// and after the switch.
const legacyInsert = `INSERT INTO public.orders_outbox (topic, payload) VALUES ($1, $2) RETURNING id`

// ledger counts every event by its key (in its payload): what writers
// committed, and what each relay sent.
type ledger struct {
	mu         sync.Mutex
	committed  map[string]bool
	rolledBack int
	sentOld    map[string]int
	sentNew    map[string]int
	// notCommitted: sent by a relay and never committed by a writer.
	writerErrors []string
}

func newLedger() *ledger {
	return &ledger{committed: map[string]bool{}, sentOld: map[string]int{}, sentNew: map[string]int{}}
}

func keyOf(payload []byte) string {
	var p struct {
		Key string `json:"key"`
	}
	_ = json.Unmarshal(payload, &p)
	return p.Key
}

// writeOrders is one application writer until ctx ends: transactions of
// one to three orders with the application's unchanged INSERT, about a
// third rolled back. It records the largest id each INSERT answered.
func writeOrders(ctx context.Context, pool *pgxpool.Pool, w int, l *ledger, maxID *atomic.Int64) {
	for n := 0; ctx.Err() == nil; {
		tx, err := pool.Begin(ctx)
		if err != nil {
			break
		}
		var keys []string
		var failed error
		for range 1 + rand.IntN(3) {
			key := fmt.Sprintf("w%d-%d", w, n)
			n++
			var id int64
			if err := tx.QueryRow(ctx, legacyInsert, "order.placed", fmt.Sprintf(`{"key":%q}`, key)).Scan(&id); err != nil {
				failed = err
				break
			}
			keys = append(keys, key)
			for cur := maxID.Load(); id > cur && !maxID.CompareAndSwap(cur, id); cur = maxID.Load() {
			}
		}
		if failed != nil || rand.IntN(3) == 0 {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			l.mu.Lock()
			if failed != nil && ctx.Err() == nil {
				l.writerErrors = append(l.writerErrors, failed.Error())
			}
			l.rolledBack += len(keys)
			l.mu.Unlock()
			continue
		}
		if err := tx.Commit(context.WithoutCancel(ctx)); err != nil {
			l.mu.Lock()
			l.writerErrors = append(l.writerErrors, err.Error())
			l.mu.Unlock()
			continue
		}
		l.mu.Lock()
		for _, k := range keys {
			l.committed[k] = true
		}
		l.mu.Unlock()
	}
}

// oldRelay is the application's relay: one poll and send, by its kind.
type oldRelay struct {
	name string
	// setup grants the relay's role what it reads and marks.
	setup string
	// poll sends one batch (records it in sent) and says how many.
	poll func(ctx context.Context, pool *pgxpool.Pool, last *int64, sent func(key string)) (int, error)
	// drained is the documented moment to retire it: every old row sent.
	drained func(ctx context.Context, pool *pgxpool.Pool, last int64, res *migrate.AdoptResult) (bool, error)
}

var oldRelays = []oldRelay{
	{
		name:  "processed_at IS NULL",
		setup: `GRANT SELECT, UPDATE (processed_at) ON public.orders_outbox TO %s`,
		poll: func(ctx context.Context, pool *pgxpool.Pool, _ *int64, sent func(string)) (int, error) {
			var keys []string
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				rows, err := tx.Query(ctx, `SELECT id, payload FROM public.orders_outbox WHERE processed_at IS NULL
					ORDER BY id LIMIT 20 FOR UPDATE SKIP LOCKED`)
				if err != nil {
					return err
				}
				var ids []int64
				for rows.Next() {
					var id int64
					var payload []byte
					if err := rows.Scan(&id, &payload); err != nil {
						return err
					}
					ids, keys = append(ids, id), append(keys, keyOf(payload))
				}
				if err := rows.Err(); err != nil {
					return err
				}
				_, err = tx.Exec(ctx, `UPDATE public.orders_outbox SET processed_at = now() WHERE id = ANY($1)`, ids)
				return err
			})
			if err != nil {
				return 0, err
			}
			for _, k := range keys { // sent once the marks committed
				sent(k)
			}
			return len(keys), nil
		},
		drained: func(ctx context.Context, pool *pgxpool.Pool, _ int64, _ *migrate.AdoptResult) (bool, error) {
			var unsent int64
			err := pool.QueryRow(ctx, `SELECT count(*) FROM public.orders_outbox WHERE processed_at IS NULL`).Scan(&unsent)
			return unsent == 0, err
		},
	},
	{
		// As such relays run in production: with a lag, stopping at the
		// first row younger than it, so a short transaction that commits
		// after a later id is not passed over.
		name:  "id > last",
		setup: `GRANT SELECT ON public.orders_outbox TO %s`,
		poll: func(ctx context.Context, pool *pgxpool.Pool, last *int64, sent func(string)) (int, error) {
			rows, err := pool.Query(ctx, `SELECT id, payload, created_at < now() - interval '2 seconds'
				FROM public.orders_outbox WHERE id > $1 ORDER BY id LIMIT 20`, *last)
			if err != nil {
				return 0, err
			}
			defer rows.Close()
			n := 0
			for rows.Next() {
				var id int64
				var payload []byte
				var old bool
				if err := rows.Scan(&id, &payload, &old); err != nil {
					return n, err
				}
				if !old {
					break
				}
				sent(keyOf(payload))
				*last = id
				n++
			}
			return n, rows.Err()
		},
		drained: func(_ context.Context, _ *pgxpool.Pool, last int64, res *migrate.AdoptResult) (bool, error) {
			return res != nil && last >= res.LegacyMaxID, nil
		},
	},
}

// TestAdoptionDeliversEveryEventOnceAcrossTheSwitch runs an application
// through the whole adoption: writers insert, commit and roll back with
// their unchanged INSERT, before, during and after the switch; the old
// relay keeps sending (paused around the switch, so rows are unsent at
// it), drains the old rows through the view and is retired at the
// documented moment; then outboxkeeper's relay (read_events and
// commit_position, as its consumer registered at the switch) sends the
// rest while the fill closes the rollbacks' gaps. Counted: every committed
// event sent, none twice, none by both relays, nothing rolled back sent.
//
// Not parallel: the fill's proof reads the cluster-wide xmin horizon.
func TestAdoptionDeliversEveryEventOnceAcrossTheSwitch(t *testing.T) {
	for _, old := range oldRelays {
		t.Run(old.name, func(t *testing.T) { adoptUnderLoad(t, old) })
	}
}

func adoptUnderLoad(t *testing.T, old oldRelay) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db := testdb.New(t)
	db.Exec(t, legacyOutbox)
	app, relayRole := db.NewRole(t), db.NewRole(t)
	db.Exec(t, `GRANT INSERT, SELECT ON public.orders_outbox TO `+pgx.Identifier{app.Name}.Sanitize())
	db.Exec(t, `GRANT USAGE ON SEQUENCE public.orders_outbox_id_seq TO `+pgx.Identifier{app.Name}.Sanitize())
	db.Exec(t, fmt.Sprintf(old.setup, pgx.Identifier{relayRole.Name}.Sanitize()))
	l := newLedger()

	// The writers, for the whole test.
	writing, stopWriting := context.WithCancel(ctx)
	var writers sync.WaitGroup
	var maxID atomic.Int64
	for w := range 4 {
		writers.Go(func() { writeOrders(writing, app.Pool, w, l, &maxID) })
	}

	// The old relay, paused on request.
	var paused atomic.Bool
	var oldErrors []string
	relaying, retire := context.WithCancel(ctx)
	var last int64
	var lastMu sync.Mutex
	oldDone := make(chan struct{})
	go func() {
		defer close(oldDone)
		for relaying.Err() == nil {
			if paused.Load() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			lastMu.Lock()
			n, err := old.poll(relaying, relayRole.Pool, &last, func(k string) {
				l.mu.Lock()
				l.sentOld[k]++
				l.mu.Unlock()
			})
			lastMu.Unlock()
			if err != nil && relaying.Err() == nil {
				oldErrors = append(oldErrors, err.Error())
			}
			if n == 0 {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()

	time.Sleep(time.Second)
	paused.Store(true)
	time.Sleep(300 * time.Millisecond)
	idBefore := maxID.Load()
	adopted, err := migrate.Adopt(ctx, db.Connect(t), "outbox", migrate.AdoptOptions{Table: "public.orders_outbox"})
	if err != nil {
		t.Fatalf("adopt while the application writes: %v", err)
	}
	unsentAtSwitch := testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM public.orders_outbox_legacy WHERE processed_at IS NULL`)
	if old.name == "id > last" {
		lastMu.Lock()
		unsentAtSwitch = testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM public.orders_outbox_legacy WHERE id > $1`, last)
		lastMu.Unlock()
	}
	paused.Store(false)
	if adopted.SwitchAt < idBefore {
		t.Errorf("the switch is at %d, below an id (%d) the application was answered before it", adopted.SwitchAt, idBefore)
	}

	// The documented moment: the old relay has sent every old row.
	for {
		lastMu.Lock()
		done, err := old.drained(ctx, db.Pool, last, adopted)
		lastMu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if done {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the old relay never drained the old rows")
		}
		time.Sleep(50 * time.Millisecond)
	}
	retire()
	<-oldDone

	// outboxkeeper's relay from its registered position, with the fill
	// closing the gaps the new path's rollbacks leave.
	filling, stopFilling := context.WithCancel(ctx)
	defer stopFilling()
	s := newFill(t, db.Pool, 2*time.Second)
	go func() {
		for filling.Err() == nil {
			_, _ = s.RunOnce(filling, nil)
			time.Sleep(50 * time.Millisecond)
		}
	}()
	position := testdb.Scalar[int64](t, db.Pool, `SELECT position FROM outbox.consumers WHERE name = $1`, migrate.DefaultAdoptConsumer)
	if position != adopted.SwitchAt {
		t.Errorf("the relay's consumer starts at %d, want the switch %d", position, adopted.SwitchAt)
	}
	events := store.NewEvents(store.MustSchema("outbox"))
	relayNew := func() {
		got, err := events.ReadContiguous(ctx, db.Pool, position, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range got {
			if !e.Placeholder() {
				l.mu.Lock()
				l.sentNew[keyOf(e.Payload)]++
				l.mu.Unlock()
			}
		}
		if len(got) > 0 {
			position = testdb.Scalar[int64](t, db.Pool, `SELECT outbox.commit_position($1, $2)`, migrate.DefaultAdoptConsumer, got[len(got)-1].Sequence)
		}
	}
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); {
		relayNew()
		time.Sleep(20 * time.Millisecond)
	}
	stopWriting()
	writers.Wait()
	head := testdb.Scalar[int64](t, db.Pool, `SELECT outbox.allocation_head()`)
	for position < head {
		if ctx.Err() != nil {
			t.Fatalf("outboxkeeper's relay stopped at %d of %d", position, head)
		}
		relayNew()
		time.Sleep(20 * time.Millisecond)
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	var lost, twiceNew, twiceOld, both, spurious []string
	for k := range l.committed {
		if l.sentOld[k] == 0 && l.sentNew[k] == 0 {
			lost = append(lost, k)
		}
		if l.sentOld[k] > 0 && l.sentNew[k] > 0 {
			both = append(both, k)
		}
	}
	for k, n := range l.sentNew {
		if n > 1 {
			twiceNew = append(twiceNew, k)
		}
		if !l.committed[k] {
			spurious = append(spurious, k)
		}
	}
	for k, n := range l.sentOld {
		if n > 1 {
			twiceOld = append(twiceOld, k)
		}
		if !l.committed[k] {
			spurious = append(spurious, k)
		}
	}
	legacyCommitted := testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM public.orders_outbox_legacy`)
	t.Logf("adoption (%s): %d committed (%d before the switch, %d after), %d rolled back; %d unsent at the switch; "+
		"sent by the old relay %d, by outboxkeeper's %d; lost %d, sent twice by outboxkeeper's relay %d, by the old %d, by both %d, "+
		"rolled back yet sent %d; switch at %d, %d attempts; writer errors %d, old relay errors %d",
		old.name, len(l.committed), legacyCommitted, int64(len(l.committed))-legacyCommitted, l.rolledBack, unsentAtSwitch,
		len(l.sentOld), len(l.sentNew), len(lost), len(twiceNew), len(twiceOld), len(both), len(spurious),
		adopted.SwitchAt, adopted.Attempts, len(l.writerErrors), len(oldErrors))
	if len(lost) != 0 {
		t.Errorf("%d committed events never sent: %v", len(lost), first(lost))
	}
	if len(twiceNew) != 0 {
		t.Errorf("%d events sent twice by outboxkeeper's relay: %v", len(twiceNew), first(twiceNew))
	}
	if len(twiceOld) != 0 {
		t.Errorf("%d events sent twice by the old relay: %v", len(twiceOld), first(twiceOld))
	}
	if len(both) != 0 {
		t.Errorf("%d events sent by both relays: %v", len(both), first(both))
	}
	if len(spurious) != 0 {
		t.Errorf("%d events sent that no writer committed: %v", len(spurious), first(spurious))
	}
	if len(l.writerErrors) != 0 {
		t.Errorf("the application's INSERT failed %d times across the switch: %v", len(l.writerErrors), first(l.writerErrors))
	}
	if legacyCommitted == 0 || int64(len(l.committed)) == legacyCommitted {
		t.Errorf("%d events committed before the switch and %d after: the test needs both", legacyCommitted, int64(len(l.committed))-legacyCommitted)
	}
	if unsentAtSwitch == 0 {
		t.Error("no event was unsent at the switch: the test needs some")
	}
	if len(oldErrors) != 0 {
		t.Logf("the old relay's errors (it retried): %v", first(oldErrors))
	}
}

func first(s []string) []string { return s[:min(len(s), 5)] }

// Adopt refuses, changing nothing, what it cannot adopt soundly: it names
// the input each time.
func TestAdoptRefusesWhatItCannotAdopt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		name, setup string
		opts        migrate.AdoptOptions
		want        string
	}{
		{"no such table", ``, migrate.AdoptOptions{Table: "public.nope"}, "no table"},
		{"no sequence behind the id", `CREATE TABLE public.o (id bigint PRIMARY KEY, topic text, payload jsonb)`,
			migrate.AdoptOptions{Table: "public.o"}, "not drawn from a sequence"},
		{"no payload column", `CREATE TABLE public.o (id bigserial PRIMARY KEY, topic text, body jsonb)`,
			migrate.AdoptOptions{Table: "public.o"}, "no payload column payload"},
		{"a payload that is not JSON", `CREATE TABLE public.o (id bigserial PRIMARY KEY, topic text, payload bytea)`,
			migrate.AdoptOptions{Table: "public.o"}, "must hold JSON"},
		{"no topic", `CREATE TABLE public.o (id bigserial PRIMARY KEY, payload jsonb)`,
			migrate.AdoptOptions{Table: "public.o"}, "no topic column topic"},
		{"a composite key", `CREATE TABLE public.o (a bigint, b bigint, topic text, payload jsonb, PRIMARY KEY (a, b))`,
			migrate.AdoptOptions{Table: "public.o"}, "no single-column primary key"},
		{"an outbox already published to", `CREATE TABLE public.o (id bigserial PRIMARY KEY, topic text, payload jsonb);
			SELECT outbox.publish('t', '{}')`, migrate.AdoptOptions{Table: "public.o"}, "published already"},
		{"an archive name in use", `CREATE TABLE public.o (id bigserial PRIMARY KEY, topic text, payload jsonb);
			CREATE TABLE public.o_legacy ()`, migrate.AdoptOptions{Table: "public.o"}, "exists already"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t)
			if c.setup != "" {
				db.Exec(t, c.setup)
			}
			before := objectsIn(t, db, "public") + "|" + objectsIn(t, db, "outbox")
			_, err := migrate.Adopt(ctx, db.Connect(t), "outbox", c.opts)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Adopt = %v, want a refusal saying %q", err, c.want)
			}
			if after := objectsIn(t, db, "public") + "|" + objectsIn(t, db, "outbox"); after != before {
				t.Errorf("the refusal changed the database: %s, then %s", before, after)
			}
		})
	}
}

// Adopt into an outbox schema whose name another application's schema
// has: refused before anything changes, the old table left as it was.
func TestAdoptRefusesASchemaNameTakenByOthers(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	db.Exec(t, legacyOutbox)
	db.Exec(t, `CREATE SCHEMA billing; CREATE TABLE billing.invoices (id bigserial PRIMARY KEY)`)
	before := objectsIn(t, db, "public") + "|" + objectsIn(t, db, "billing")
	_, err := migrate.Adopt(context.Background(), db.Connect(t), "billing", migrate.AdoptOptions{Table: "public.orders_outbox"})
	var taken *migrate.SchemaTakenError
	if !errors.As(err, &taken) || !strings.Contains(err.Error(), "schema billing already exists") {
		t.Fatalf("Adopt = %v, want the schema refused as taken", err)
	}
	if after := objectsIn(t, db, "public") + "|" + objectsIn(t, db, "billing"); after != before {
		t.Errorf("the refusal changed the database: %s, then %s", before, after)
	}
}

// debeziumOutbox is an outbox in the shape Debezium's outbox event router
// reads, with a text payload and a bigserial id.
const debeziumOutbox = `CREATE SCHEMA app;
CREATE TABLE app.outbox (
	id            bigserial PRIMARY KEY,
	aggregatetype text NOT NULL,
	aggregateid   text NOT NULL,
	type          text,
	payload       text NOT NULL,
	meta          jsonb,
	processed     boolean NOT NULL DEFAULT false);
INSERT INTO app.outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', '1', 'OrderPlaced', '{"id":1}'), ('order', '2', 'OrderPlaced', '{"id":2}')`

// adoptDebezium adopts app.outbox with every column mapped, and returns
// the application's role (granted as before the switch) and the result.
func adoptDebezium(t *testing.T, db *testdb.DB) (*testdb.Role, *migrate.AdoptResult) {
	t.Helper()
	db.Exec(t, debeziumOutbox)
	app := db.NewRole(t)
	who := pgx.Identifier{app.Name}.Sanitize()
	db.Exec(t, `GRANT USAGE ON SCHEMA app TO `+who)
	db.Exec(t, `GRANT INSERT, SELECT, UPDATE (processed) ON app.outbox TO `+who)
	db.Exec(t, `GRANT USAGE ON SEQUENCE app.outbox_id_seq TO `+who)
	res, err := migrate.Adopt(context.Background(), db.Connect(t), "outbox", migrate.AdoptOptions{
		Table: "app.outbox", PayloadColumn: "payload", TopicColumn: "aggregatetype", HeadersColumn: "meta",
		AggregateTypeColumn: "aggregatetype", AggregateIDColumn: "aggregateid", EventTypeColumn: "type",
	})
	if err != nil {
		t.Fatalf("adopt: %v", err)
	}
	return app, res
}

// After the switch the old name keeps every use the application had:
// INSERT ... RETURNING id answers the event's sequence, COPY publishes,
// the mapped columns land in the event, the old rows stay readable and
// updatable through the view, and the old id sequence no longer moves.
func TestAdoptedViewKeepsTheApplicationsStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	app, res := adoptDebezium(t, db)
	if res.SwitchAt != 2 || res.LegacyRows != 2 || res.LegacyMaxID != 2 || res.View != "app.outbox" || res.Archive != "app.outbox_legacy" {
		t.Errorf("adopt answered %+v, want the switch at 2 with 2 old rows, app.outbox archived as app.outbox_legacy", res)
	}
	oldSeq := testdb.Scalar[int64](t, db.Pool, `SELECT last_value FROM app.outbox_id_seq`)

	conn := app.Connect(t)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := testdb.Scalar[int64](t, tx, `INSERT INTO app.outbox (aggregatetype, aggregateid, type, payload, meta)
		VALUES ('order', '42', 'OrderPlaced', '{"id":42}', '{"trace":"t"}') RETURNING id`)
	if id != 3 {
		t.Errorf("INSERT ... RETURNING id answered %d, want 3: the event's sequence, after the old ids", id)
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"app", "outbox"}, []string{"aggregatetype", "aggregateid", "payload"},
		pgx.CopyFromRows([][]any{{"invoice", "7", `{"n":1}`}, {"invoice", "8", `{"n":2}`}})); err != nil {
		t.Fatalf("COPY into the view: %v", err)
	}
	xid := testdb.Scalar[string](t, tx, `SELECT pg_current_xact_id()::text`)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	type event struct {
		Sequence                                             int64
		XID, Topic, Payload, Headers, AggType, AggID, EvType *string
	}
	rows, err := db.Pool.Query(ctx, `SELECT sequence, xid::text, topic, payload::text, headers::text, aggregate_type, aggregate_id, event_type
		FROM outbox.events ORDER BY sequence`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[event])
	if err != nil {
		t.Fatal(err)
	}
	str := func(p *string) string {
		if p == nil {
			return "NULL"
		}
		return *p
	}
	var lines []string
	for _, e := range got {
		if str(e.XID) != xid {
			t.Errorf("event %d has xid %s, want the writer's %s", e.Sequence, str(e.XID), xid)
		}
		lines = append(lines, fmt.Sprintf("%d %s %s %s %s/%s/%s", e.Sequence, str(e.Topic), str(e.Payload), str(e.Headers), str(e.AggType), str(e.AggID), str(e.EvType)))
	}
	want := []string{
		`3 order {"id": 42} {"trace": "t"} order/42/OrderPlaced`,
		`4 invoice {"n": 1} NULL invoice/7/NULL`,
		`5 invoice {"n": 2} NULL invoice/8/NULL`,
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if n := testdb.Scalar[int64](t, app.Pool, `SELECT count(*) FROM app.outbox`); n != 2 {
		t.Errorf("the view shows %d rows, want the 2 old ones", n)
	}
	if tag := testdb.Exec(t, app.Pool, `UPDATE app.outbox SET processed = true WHERE id = 1`); tag.RowsAffected() != 1 {
		t.Errorf("marking an old row through the view updated %d rows", tag.RowsAffected())
	}
	if done := testdb.Scalar[bool](t, db.Pool, `SELECT processed FROM app.outbox_legacy WHERE id = 1`); !done {
		t.Error("the mark through the view did not reach the archived row")
	}
	if now := testdb.Scalar[int64](t, db.Pool, `SELECT last_value FROM app.outbox_id_seq`); now != oldSeq {
		t.Errorf("the old id sequence moved from %d to %d", oldSeq, now)
	}

	// Bad rows fail the application's INSERT, allocating nothing.
	head := testdb.Scalar[int64](t, db.Pool, `SELECT outbox.allocation_head()`)
	for _, bad := range []struct{ sql, state string }{
		{`INSERT INTO app.outbox (aggregatetype, aggregateid, payload) VALUES ('order', '9', 'not json')`, "22P02"},
		{`INSERT INTO app.outbox (aggregateid, payload) VALUES ('9', '{}')`, "23502"},
	} {
		_, err := app.Pool.Exec(ctx, bad.sql)
		if sqlstate(err) != bad.state {
			t.Errorf("%s: %v, want SQLSTATE %s", bad.sql, err, bad.state)
		}
	}
	if now := testdb.Scalar[int64](t, db.Pool, `SELECT outbox.allocation_head()`); now != head {
		t.Errorf("refused rows moved the allocation head from %d to %d", head, now)
	}
}

// Rule 1 through the adopted view: an insert into the old name that a
// savepoint undid leaves its writer holding an xid, so the fill waits for
// it before it fills the sequence.
//
// Not parallel: the fill's proof reads the cluster-wide xmin horizon.
func TestRule1ThroughTheAdoptedView(t *testing.T) {
	ctx := context.Background()
	db := testdb.New(t)
	app, _ := adoptDebezium(t, db)
	testdb.Exec(t, app.Pool, `INSERT INTO app.outbox (aggregatetype, aggregateid, payload) VALUES ('order', '3', '{}')`)
	_ = fillPass(t, db.Pool, 5*time.Second)

	conn := app.Connect(t)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if err := inSavepointRolledBack(ctx, tx, `INSERT INTO app.outbox (aggregatetype, aggregateid, payload) VALUES ('order', '4', '{}')`); err != nil {
		t.Fatal(err)
	}
	held := testdb.Scalar[int64](t, db.Pool, `SELECT outbox.allocation_head()`)
	if assigned := testdb.Scalar[*string](t, tx, `SELECT pg_current_xact_id_if_assigned()::text`); assigned == nil {
		t.Errorf("the writer holds sequence %d and no xid", held)
	}
	testdb.Exec(t, app.Pool, `INSERT INTO app.outbox (aggregatetype, aggregateid, payload) VALUES ('order', '5', '{}')`)
	if res := fillPass(t, db.Pool, 1500*time.Millisecond); res.Filled != 0 {
		t.Errorf("the fill filled %d while the writer of %d runs", res.Filled, held)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if res := fillPass(t, db.Pool, 20*time.Second); res.Filled != 1 {
		t.Errorf("after the writer ended the fill filled %d, want %d", res.Filled, held)
	}
}
