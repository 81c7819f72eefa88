package dburl

import "testing"

func TestForDatabaseChangesOnlyTheDatabaseName(t *testing.T) {
	got, err := ForDatabase("postgres://u@127.0.0.1:5432/postgres?sslmode=disable", "demo")
	if err != nil {
		t.Fatal(err)
	}
	if want := "postgres://u@127.0.0.1:5432/demo?sslmode=disable"; got != want {
		t.Errorf("ForDatabase = %q, want %q", got, want)
	}
	if _, err := ForDatabase("host=127.0.0.1 dbname=x", "demo"); err == nil {
		t.Fatal("a keyword/value connection string was accepted")
	}
}
