package main

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// The database's refusal of an operator's action keeps its own text and
// gains what to do: a login without the operator role is told how to get
// one, a schema without the action's functions (or, for consumers, its
// table) to migrate, and anything else gets the database's hint; an error
// that is not the database's is left as it is.
func TestOperatorActionRefusalsSayWhatToDo(t *testing.T) {
	actions := []struct {
		name    string
		explain func(error, string) error
		denied  string // the advice to a login without the operator role
		missing string // the advice on a schema without the action's objects
		// missingCodes mean the schema lacks them; others get no advice.
		missingCodes, otherCodes []string
	}{
		{"consumers", explainConsumerError,
			"this login may not manage consumers: use the schema's owner, or a role set up with SELECT app.grant_operator('<role>')",
			"the schema has no consumer functions yet: apply the migrations ('outboxkeeper migrate up')",
			[]string{"42883", "42P01"}, []string{"42703"}},
		{"skip", explainSkipError,
			"this login may not skip a stall: use the schema's owner, or a role set up with SELECT app.grant_operator('<role>')",
			"the schema has no skip_stall: apply the migrations ('outboxkeeper migrate up')",
			[]string{"42883"}, []string{"42P01", "P0002"}},
	}
	for _, a := range actions {
		says := func(t *testing.T, pg *pgconn.PgError, advice string) {
			t.Helper()
			pg.Severity = "ERROR"
			got := a.explain(pg, "app")
			want := pg.Error()
			if advice != "" {
				want += "\n" + advice
			}
			if got.Error() != want {
				t.Errorf("%s: text %q, want %q", pg.Code, got.Error(), want)
			}
			if !errors.Is(got, pg) {
				t.Errorf("%s: the database's error is not wrapped", pg.Code)
			}
		}
		t.Run(a.name+"/no operator role", func(t *testing.T) {
			says(t, &pgconn.PgError{Code: "42501", Message: "permission denied"}, a.denied)
		})
		t.Run(a.name+"/no such object", func(t *testing.T) {
			for _, code := range a.missingCodes {
				says(t, &pgconn.PgError{Code: code, Message: "missing"}, a.missing)
			}
		})
		t.Run(a.name+"/another refusal", func(t *testing.T) {
			for _, code := range a.otherCodes {
				says(t, &pgconn.PgError{Code: code, Message: "refused"}, "")
			}
			says(t, &pgconn.PgError{Code: "P0001", Message: "refused", Hint: "do it later"}, "do it later")
		})
		t.Run(a.name+"/not the database's error", func(t *testing.T) {
			plain := errors.New("connection reset")
			if got := a.explain(plain, "app"); got != plain {
				t.Errorf("%v, want the error unchanged", got)
			}
		})
	}
	// A consumer that is not there is the operator's mistake, said plainly.
	got := explainConsumerError(&pgconn.PgError{Severity: "ERROR", Code: "P0002", Message: `no consumer "x"`}, "app")
	var r *refusal
	if !errors.As(got, &r) {
		t.Errorf("no such consumer: %T, want a refusal", got)
	}
	if got.Error() != `no consumer "x"` {
		t.Errorf("no such consumer: text %q, want the database's message alone", got.Error())
	}
}
