package store

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
// same statement is worth sending again after COMPENSATE_RETRY_INTERVAL.
//
// Server errors are classified by SQLSTATE class:
//   - 08 connection exception (the server went away, or refused us);
//   - 40 transaction rollback (serialization failure, deadlock detected);
//   - 53 insufficient resources (too_many_connections, out of memory);
//   - 57P operator intervention: admin/crash shutdown, cannot connect now
//     (failover, restart). 57014 query_canceled is not here: that is our
//     own deadline or an operator's cancel, and retrying it would only
//     overrun the budget.
//
// Client-side failures to reach the server (refused, reset, EOF, a dial
// timeout) are transient too. Our own context ending is not.
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
	if pgconn.SafeToRetry(err) {
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
