package dburl

import "testing"

func TestForDatabase(t *testing.T) {
	got, err := ForDatabase("postgres://u@127.0.0.1:5432/postgres?sslmode=disable", "demo")
	if err != nil || got != "postgres://u@127.0.0.1:5432/demo?sslmode=disable" {
		t.Fatalf("got %q, %v", got, err)
	}
	if _, err := ForDatabase("host=127.0.0.1 dbname=x", "demo"); err == nil {
		t.Fatal("a keyword/value connection string was accepted")
	}
}
