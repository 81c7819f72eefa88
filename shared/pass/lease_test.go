package pass_test

import (
	"context"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// One leases table serves every name: the relay's and deliver's leases,
// which no migration creates, are rows the first pass to ask makes, and a
// name's lease never stands in another's way.
func TestLeasesByNameAreIndependent(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kit, err := pass.NewKit("relay", db.Pool, 5*time.Second, pass.Options{})
	if err != nil {
		t.Fatal(err)
	}
	orders := pass.NewLease(pass.LeaseSpec{Schema: db.Schema.Name(), Name: "relay:orders", Tick: 50 * time.Millisecond})
	billing := pass.NewLease(pass.LeaseSpec{Schema: db.Schema.Name(), Name: "relay:billing", Tick: 50 * time.Millisecond})
	take := func(l *pass.Lease) *pass.Holding {
		t.Helper()
		h := l.Hold(kit.Begin(ctx))
		if err := h.Acquire(ctx, pass.AcquireParams{Ride: l.Ride(pass.StepAcquire, "")}); err != nil {
			t.Fatal(err)
		}
		return h
	}

	first := take(orders)
	if !first.Held {
		t.Fatal("the first pass did not get a lease nobody held")
	}
	if other := take(billing); !other.Held {
		t.Error("another name's lease is held up by relay:orders")
	}
	second := take(orders)
	if second.Held || !second.Waiting {
		t.Errorf("a second pass took relay:orders while the first holds it (held %v, waiting %v)", second.Held, second.Waiting)
	}
	rows := testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.leases WHERE name LIKE 'relay:%'`)
	if rows != 2 {
		t.Errorf("%d relay lease rows, want one per name", rows)
	}

	gaveBack, err := first.Close(ctx, orders.Ride(pass.StepFinish, ""), nil, nil)
	if err != nil || !gaveBack {
		t.Fatalf("the holder's release: gave back %v, %v", gaveBack, err)
	}
	if again := take(orders); !again.Held {
		t.Error("the lease released is not taken by the next pass")
	}
}
