package migrations_test

import (
	"context"
	"testing"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	migrate "github.com/outboxkeeper/outboxkeeper/shared/migrations"
)

// 0021 extends grant_operator and grant_maintainer by wrapping them: a
// role set up before it gets the consumers' functions through
// regrant_roles, and keeps everything it had (skip_stall, relay_parked).
func TestConsumerMigrationRegrantsRolesSetUpBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	const schema = "before_consumers"
	conn := db.Connect(t)
	applyBefore(t, conn, schema, 21)
	op, m := db.NewRole(t), db.NewRole(t)
	testdb.Exec(t, conn, `SELECT before_consumers.grant_operator($1)`, op.Name)
	testdb.Exec(t, conn, `SELECT before_consumers.grant_maintainer($1)`, m.Name)
	if _, err := migrate.Apply(ctx, conn, schema); err != nil {
		t.Fatalf("apply 0021: %v", err)
	}
	for _, c := range []struct {
		what, role, sql string
	}{
		{"the operator runs consumer_status", op.Name, `SELECT has_function_privilege($1, 'before_consumers.consumer_status()', 'EXECUTE')`},
		{"the operator runs rewind_consumer", op.Name, `SELECT has_function_privilege($1, 'before_consumers.rewind_consumer(text, bigint, text, text)', 'EXECUTE')`},
		{"the operator runs retire_consumer", op.Name, `SELECT has_function_privilege($1, 'before_consumers.retire_consumer(text, text, text)', 'EXECUTE')`},
		{"the operator reads consumer_changes", op.Name, `SELECT has_table_privilege($1, 'before_consumers.consumer_changes', 'SELECT')`},
		{"the operator keeps skip_stall", op.Name, `SELECT has_function_privilege($1, 'before_consumers.skip_stall(bigint, text, text, jsonb)', 'EXECUTE')`},
		{"the operator keeps relay_parked", op.Name, `SELECT has_column_privilege($1, 'before_consumers.relay_parked', 'resend_requested_at', 'UPDATE')`},
		{"the maintainer runs consumer_status", m.Name, `SELECT has_function_privilege($1, 'before_consumers.consumer_status()', 'EXECUTE')`},
		{"the maintainer may not rewind", m.Name, `SELECT NOT has_function_privilege($1, 'before_consumers.rewind_consumer(text, bigint, text, text)', 'EXECUTE')`},
		{"the maintainer may not retire", m.Name, `SELECT NOT has_function_privilege($1, 'before_consumers.retire_consumer(text, text, text)', 'EXECUTE')`},
		{"the maintainer keeps read_events", m.Name, `SELECT has_function_privilege($1, 'before_consumers.read_events(bigint, integer)', 'EXECUTE')`},
		{"nobody else runs rewind_consumer", "public", `SELECT NOT has_function_privilege($1, 'before_consumers.rewind_consumer(text, bigint, text, text)', 'EXECUTE')`},
	} {
		if !testdb.Scalar[bool](t, conn, c.sql, c.role) {
			t.Errorf("after 0021: not so that %s", c.what)
		}
	}
}
