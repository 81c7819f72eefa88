// Package migrations embeds the SQL migrations so every binary carries the
// schema it expects. Files are applied in name order by shared/migrate.
package migrations

import "embed"

// Files holds NNNN_name.sql migrations. Each is a template: {{schema}} is
// replaced with the quoted schema name, {{schema_name}} with its text.
//
//go:embed *.sql
var Files embed.FS
