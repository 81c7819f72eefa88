// Package migrations is the outbox schema: the SQL migrations, embedded so
// every binary carries the schema it expects, and the migrator that applies
// them to one outbox schema — in name order, each recorded in
// <schema>.schema_migrations, a no-op when already applied, and safe when
// two processes run it at once.
package migrations

import (
	"embed"

	"github.com/outboxkeeper/outboxkeeper/internal/sqltext"
)

// Files holds NNNN_name.sql migrations. Each is a template: {{schema}} is
// replaced with the quoted schema name, {{schema_name}} with its text.
//
//go:embed [0-9]*.sql
var Files embed.FS

// bookkeepingFile is schema_migrations.sql: the migrator's own statements,
// not a migration.
//
//go:embed schema_migrations.sql
var bookkeepingFile embed.FS

// schemaMigrationsSQL are the statements on <schema>.schema_migrations.
var schemaMigrationsSQL = sqltext.MustParse(bookkeepingFile, "schema_migrations.sql")
