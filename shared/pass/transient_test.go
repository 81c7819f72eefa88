package pass

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestTransientOnlyForErrorsARetryCanCure(t *testing.T) {
	t.Parallel()
	pgErr := func(code string) error { return fmt.Errorf("insert: %w", &pgconn.PgError{Code: code}) }
	cases := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{pgErr("08006"), true},  // connection_failure
		{pgErr("08001"), true},  // sqlclient_unable_to_establish_sqlconnection
		{pgErr("40001"), true},  // serialization_failure
		{pgErr("40P01"), true},  // deadlock_detected
		{pgErr("53300"), true},  // too_many_connections
		{pgErr("57P01"), true},  // admin_shutdown
		{pgErr("57P02"), true},  // crash_shutdown
		{pgErr("57P03"), true},  // cannot_connect_now
		{pgErr("57014"), false}, // query_canceled: our own deadline
		{pgErr("23505"), false}, // unique_violation
		{pgErr("42P01"), false}, // undefined_table
		{pgErr("28P01"), false}, // invalid_password
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{fmt.Errorf("read allocation head: %w", pgconn.ErrConnClosed), true}, // a batch after a crash
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{context.DeadlineExceeded, false},
		{context.Canceled, false},
		{errors.New("something else"), false},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.err), func(t *testing.T) {
			if got := Transient(c.err); got != c.want {
				t.Errorf("Transient(%v) = %v, want %v", c.err, got, c.want)
			}
		})
	}
}
