package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/outboxkeeper/outboxkeeper/internal/version"
	"github.com/outboxkeeper/outboxkeeper/shared/migrations"
)

type versionFlags struct{ json bool }

var versionCommand = &command{
	name:    "version",
	summary: "this build's version, commit and schema version",
	help: `Prints the semantic version, the commit it was built from, and the schema
version its functions require (its last migration); 'outboxkeeper --version'
prints the first line alone. It needs no database.`,
	flags: func(fs *flag.FlagSet) any {
		f := &versionFlags{}
		fs.BoolVar(&f.json, "json", false, "print JSON for scripts")
		return f
	},
	run: func(ctx context.Context, e *env, opts any) error {
		latest := migrations.Latest()
		if opts.(*versionFlags).json {
			return printJSON(e.stdout, struct {
				Version       string `json:"version"`
				Commit        string `json:"commit"`
				SchemaVersion int    `json:"schema_version"`
				LastMigration string `json:"last_migration"`
			}{version.Number(), version.Commit(), latest.Version(), latest.Name})
		}
		_, err := fmt.Fprintf(e.stdout, "%s\nschema version %d (%s)\n", version.String(), latest.Version(), latest.Name)
		return err
	},
}
