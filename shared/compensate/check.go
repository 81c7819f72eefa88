package compensate

import (
	"context"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/sqltext"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

//go:embed check.sql
var sqlFiles embed.FS

var checkFile = sqltext.MustParse(sqlFiles, "check.sql")

// checkArgs are check.sql's arguments for xids.
func checkArgs(xids []uint64) pgx.NamedArgs {
	return pgx.NamedArgs{"xids": xids, "too_old": StatusTooOld, "in_progress": StatusInProgress, "future": StatusFuture}
}

// check runs check.sql for xids: the head and each writer's status.
func (s *Service) check(ctx context.Context, q store.Querier, xids []uint64) (Check, error) {
	rows, err := q.Query(ctx, s.checkSQL, checkArgs(xids))
	if err != nil {
		return Check{}, fmt.Errorf("check writers: %w", err)
	}
	// One row per xid (or one row of NULLs for none), each carrying the
	// batch's head and xmax.
	type checkRow struct {
		Head   int64
		XMax   uint64
		XID    *uint64
		Status *string
	}
	read, err := pgx.CollectRows(rows, pgx.RowToStructByPos[checkRow])
	if err != nil {
		return Check{}, fmt.Errorf("check writers: %w", err)
	}
	c := Check{Status: map[uint64]string{}}
	for _, r := range read {
		c.Head, c.XMax = r.Head, r.XMax
		if r.XID != nil && r.Status != nil {
			c.Status[*r.XID] = *r.Status
		}
	}
	return c, nil
}
