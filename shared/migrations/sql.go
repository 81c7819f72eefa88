// Package migrations is the outbox schema: the SQL migrations, embedded so
// every binary carries the schema it expects, and the migrator that applies
// them to one outbox schema — in name order, each recorded in
// <schema>.schema_migrations, a no-op when already applied, and safe when
// two processes run it at once.
package migrations

import "embed"

// Files holds NNNN_name.sql migrations. Each is a template: {{schema}} is
// replaced with the quoted schema name, {{schema_name}} with its text.
//
//go:embed *.sql
var Files embed.FS
