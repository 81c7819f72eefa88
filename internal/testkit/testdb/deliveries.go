package testdb

import (
	"context"
	"testing"
)

// DeliveryState is the state and dead_reason ("" for none) of delivery id.
func (d *DB) DeliveryState(t testing.TB, id int64) (state, reason string) {
	t.Helper()
	if err := d.Pool.QueryRow(context.Background(), `SELECT state, coalesce(dead_reason, '') FROM outbox.deliveries WHERE id = $1`, id).Scan(&state, &reason); err != nil {
		t.Fatalf("testdb: the state of delivery %d: %v", id, err)
	}
	return state, reason
}

// WantDeliveryState fails the test unless delivery id is in state want.
func (d *DB) WantDeliveryState(t testing.TB, id int64, want string) {
	t.Helper()
	if st, _ := d.DeliveryState(t, id); st != want {
		t.Errorf("delivery %d is %s, want %s", id, st, want)
	}
}
