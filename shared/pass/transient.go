package pass

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// Transient says whether a database error may go away on its own, so the
// same statement is worth sending again after a pause (Run.Retry). Every
// caller sends statements that are safe to repeat: the lost one may have
// run.
//
// Server errors are classified by SQLSTATE class:
//   - 08 connection exception (the server went away, or refused us);
//   - 40 transaction rollback (serialization failure, deadlock detected);
//   - 53 insufficient resources (too_many_connections, out of memory);
//   - 57P operator intervention: admin shutdown (57P01, also
//     pg_terminate_backend), crash shutdown (57P02), cannot connect now
//     (57P03: starting up, shutting down, in recovery). 57014
//     query_canceled is not here: that is our own deadline or an
//     operator's cancel, and retrying it would only overrun the budget.
//
// A PgError inside a *pgconn.ConnectError (57P03 while the server
// restarts) is judged by its code first, so a refused password stays
// permanent.
//
// Client-side, every way pgx v5 reports a connection lost after a crash or
// a restart is transient:
//   - *pgconn.ConnectError: a dial refused, reset or timed out;
//   - pgconn.ErrConnClosed ("conn closed"): a statement on a connection
//     the driver already closed. After a crash this is what a batch
//     reports (Bounded sends every statement as one): reading the
//     first result swallows the read's EOF, closes the connection, and the
//     next read of the same batch returns ErrConnClosed, which pgx does
//     not mark safe to retry because the batch may have reached the
//     server;
//   - SafeToRetry errors: a connection that could not be locked ("conn
//     busy", "conn closed", "conn uninitialized") or a context already
//     done before anything was sent;
//   - io.ErrUnexpectedEOF (pgproto3's EOF inside a message: rows cut off
//     mid-result), io.EOF, ECONNREFUSED, ECONNRESET, EPIPE, net.ErrClosed
//     and any other net.Error (a read or write on a dead socket).
//
// Our own context ending is not.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		code := pgErr.Code
		return strings.HasPrefix(code, "08") || strings.HasPrefix(code, "40") ||
			strings.HasPrefix(code, "53") || strings.HasPrefix(code, "57P")
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true
	}
	// pgx says so when the statement never reached the server.
	if pgconn.SafeToRetry(err) || errors.Is(err, pgconn.ErrConnClosed) {
		return true
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr)
}
