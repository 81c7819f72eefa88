package main

import (
	"encoding/json"
	"testing"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
)

// adopt switches an outbox table over and says what it did and what to do
// next; run again on the view it refuses, naming why; without --table it
// is a usage error; into a schema name another application holds it
// refuses before anything changes.
func TestAdoptCommand(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	db.Exec(t, `CREATE TABLE public.orders_outbox (id bigserial PRIMARY KEY, topic text NOT NULL, payload jsonb NOT NULL, processed_at timestamptz)`)
	db.Exec(t, `INSERT INTO public.orders_outbox (topic, payload) SELECT 'order.placed', '{}' FROM generate_series(1, 3)`)
	vars := map[string]string{"DATABASE_URL": db.URL}

	code, out, errs := cli(t, vars, "adopt")
	wantCode(t, "adopt without --table", code, exitUsage, out, errs)
	wantIn(t, "adopt without --table", errs, "--table is required")

	db.Exec(t, `CREATE SCHEMA billing; CREATE TABLE billing.invoices (id bigserial PRIMARY KEY)`)
	code, out, errs = cli(t, vars, "adopt", "--table", "public.orders_outbox", "--schema", "billing")
	wantCode(t, "adopt into a taken schema", code, exitError, out, errs)
	wantIn(t, "adopt into a taken schema", errs, "schema billing already exists", "not an outboxkeeper schema")
	if kind := testdb.Scalar[string](t, db.Pool, `SELECT relkind::text FROM pg_class WHERE oid = 'public.orders_outbox'::regclass`); kind != "r" {
		t.Errorf("after the refusal public.orders_outbox has relkind %s, want the table untouched", kind)
	}

	code, out, errs = cli(t, vars, "adopt", "--table", "public.orders_outbox")
	wantCode(t, "adopt", code, exitOK, out, errs)
	wantIn(t, "adopt", out, "adopted public.orders_outbox", "public.orders_outbox_legacy", "continue after 3", "relay:default", "retire it")

	code, out, errs = cli(t, vars, "adopt", "--table", "public.orders_outbox", "--json")
	wantCode(t, "adopt again", code, exitError, out, errs)
	wantIn(t, "adopt again", errs, "not an ordinary table")

	db.Exec(t, `CREATE TABLE public.other (id bigserial PRIMARY KEY, kind text, body text)`)
	db.Exec(t, `CREATE SCHEMA second`)
	code, out, errs = cli(t, vars, "adopt", "--table", "public.other", "--schema", "second", "--topic", "other", "--payload-column", "body", "--json")
	wantCode(t, "adopt --json", code, exitOK, out, errs)
	var res struct {
		Schema   string   `json:"schema"`
		View     string   `json:"view"`
		SwitchAt int64    `json:"switch_at"`
		Migrated []string `json:"migrated"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("adopt --json is not JSON: %v\n%s", err, out)
	}
	if res.Schema != "second" || res.View != "public.other" || res.SwitchAt != 0 || len(res.Migrated) == 0 {
		t.Errorf("adopt --json = %+v, want public.other adopted into the new schema second at 0", res)
	}
	if seq := testdb.Scalar[int64](t, db.Pool, `INSERT INTO public.other (kind, body) VALUES ('k', '{"a":1}') RETURNING id`); seq != 1 {
		t.Errorf("the first insert through the view answered id %d, want 1", seq)
	}
	if topic := testdb.Scalar[string](t, db.Pool, `SELECT topic FROM second.events WHERE sequence = 1`); topic != "other" {
		t.Errorf("the event's topic %q, want the fixed topic other", topic)
	}
}
