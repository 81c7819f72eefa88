package migrations_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	migrate "github.com/outboxkeeper/outboxkeeper/shared/migrations"
)

// What an older build's functions do on a schema a newer build migrated,
// as after a CloudFormation rollback (the schema stays where it is): they
// start when every newer migration is marked compatible, and refuse,
// naming exactly the unmarked ones, otherwise. Each older build is this
// build's version check with fewer migrations, run in-process against the
// real schema (every migration of this build applied).
func TestAnOlderBuildRunsOnlyPastCompatibleMigrations(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	all, err := migrate.Load(testdb.Schema)
	if err != nil {
		t.Fatal(err)
	}
	upTo := func(v int) []migrate.Migration {
		i := slices.IndexFunc(all, func(m migrate.Migration) bool { return m.Version() > v })
		return all[:i]
	}
	check := func(build []migrate.Migration) error {
		st, err := migrate.ReadStatusOfBuild(context.Background(), db.Pool, testdb.Schema, build)
		if err != nil {
			t.Fatal(err)
		}
		return st.Check()
	}

	// Version 8's build: 0009 onwards are all marked compatible.
	for _, m := range all[len(upTo(8)):] {
		if !m.Compatible {
			t.Fatalf("%s is not marked compatible: pick another older build for this test", m.Name)
		}
	}
	if err := check(upTo(8)); err != nil {
		t.Errorf("version 8's build refuses a schema whose newer migrations are all compatible: %v", err)
	}

	// Version 7's build: 0008 is not marked, the later ones are.
	err = check(upTo(7))
	var verr *migrate.VersionError
	if !errors.As(err, &verr) {
		t.Fatalf("version 7's build on a schema with 0008 (not compatible) applied: %v, want a *VersionError", err)
	}
	if !slices.Equal(verr.Newer, []string{"0008_prune_state.sql"}) {
		t.Errorf("the refusal names %v, want only the unmarked 0008_prune_state.sql", verr.Newer)
	}
	if verr.Required != "0007_read_side.sql" || verr.Current != migrate.Latest().Name {
		t.Errorf("the refusal says required %s, current %s; want 0007_read_side.sql and %s", verr.Required, verr.Current, migrate.Latest().Name)
	}
}
