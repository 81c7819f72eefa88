package outbox

import "github.com/outboxkeeper/outboxkeeper/internal/store"

// statements are the application's statements, from the tables' files,
// rendered once for the Outbox's schema.
type statements struct {
	publish, publishRouted, readEvents, head string

	enqueue, claimPending, stateOf string
	markDelivered, ack             transition

	commitPosition string
}

func newStatements(schema store.Schema) statements {
	n := schema.Name()
	return statements{
		publish:       store.EventsSQL.Statement("publish", n),
		publishRouted: store.EventsSQL.Statement("publish_routed", n),
		readEvents:    store.EventsSQL.Statement("read_events", n),
		head:          store.EventsSQL.Statement("allocation_head", n),

		enqueue:      store.DeliveriesSQL.Statement("enqueue", n),
		claimPending: store.DeliveriesSQL.Statement("claim_pending", n),
		stateOf:      store.DeliveriesSQL.Statement("state_of", n),
		markDelivered: transition{
			sql:  store.DeliveriesSQL.Statement("mark_delivered", n),
			from: store.StatePending, to: store.StateDelivered,
		},
		ack: transition{
			sql:  store.DeliveriesSQL.Statement("ack", n),
			from: store.StateDelivered, to: store.StateAcked,
		},

		commitPosition: store.ConsumersSQL.Statement("commit_position", n),
	}
}
