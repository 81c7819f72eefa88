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
	all := mustLoad(t, testdb.Schema)
	upTo := func(v int) []migrate.Migration {
		if i := slices.IndexFunc(all, func(m migrate.Migration) bool { return m.Version() > v }); i >= 0 {
			return all[:i]
		}
		return all
	}
	check := func(build []migrate.Migration) error {
		st, err := migrate.ReadStatusOfBuild(context.Background(), db.Pool, testdb.Schema, build)
		if err != nil {
			t.Fatal(err)
		}
		return st.Check()
	}

	// The last migration not marked compatible, u: the build just before
	// it refuses this schema naming u alone; the build that has it starts,
	// every migration after it being compatible.
	last := -1
	for i, m := range all {
		if !m.Compatible {
			last = i
		}
	}
	if last < 1 {
		t.Fatalf("no migration after the first is unmarked: the test needs one to refuse on")
	}
	unmarked, before := all[last], all[last-1]
	if err := check(upTo(unmarked.Version())); err != nil {
		t.Errorf("%s's build refuses a schema whose newer migrations are all compatible: %v", unmarked.Name, err)
	}
	err := check(upTo(before.Version()))
	var verr *migrate.VersionError
	if !errors.As(err, &verr) {
		t.Fatalf("%s's build on a schema with %s (not compatible) applied: %v, want a *VersionError", before.Name, unmarked.Name, err)
	}
	if !slices.Equal(verr.Newer, []string{unmarked.Name}) {
		t.Errorf("the refusal names %v, want only the unmarked %s", verr.Newer, unmarked.Name)
	}
	if verr.Required != before.Name || verr.Current != migrate.Latest().Name {
		t.Errorf("the refusal says required %s, current %s; want %s and %s", verr.Required, verr.Current, before.Name, migrate.Latest().Name)
	}
}
