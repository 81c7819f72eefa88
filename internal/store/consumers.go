package store

// ConsumerPosition is one row of <schema>.consumers: the last sequence a
// consumer has taken. The application commits positions (shared/outbox,
// through consumers.sql); the prune reads the slowest.
type ConsumerPosition struct {
	Name     string
	Position int64
}
