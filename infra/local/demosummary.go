package local

// DemoSummary is the demo's result as JSON (infra/cmd/demo, DEMO_SUMMARY),
// as the demo writes it and make bench (infra/cmd/bench) reads it: the
// verdict, the settings it ran with, and each latency's figures.
type DemoSummary struct {
	OK          bool    `json:"ok"`
	Schedule    string  `json:"schedule"`
	DurationS   float64 `json:"duration_s"`
	HoldS       float64 `json:"hold_s"`
	HoldEveryS  float64 `json:"hold_every_s"`
	Publishers  int     `json:"publishers"`
	GraceS      float64 `json:"grace_s"`
	TickS       float64 `json:"tick_s"`
	Committed   int     `json:"committed"`
	RolledBack  int     `json:"rolled_back"`
	Placeholder struct {
		Reported   Latency `json:"reported"`
		Unreported Latency `json:"unreported"`
	} `json:"rollback_to_placeholder"`
	Consumer struct {
		Reported   Latency `json:"reported"`
		Unreported Latency `json:"unreported"`
	} `json:"rollback_to_consumer"`
	// CommitToQueue is commit → message in the relay's queue, and the
	// demo's consumer's first read of the event → the queue.
	CommitToQueue struct {
		All      Latency `json:"all"`
		FromRead Latency `json:"from_consumer_read"`
	} `json:"commit_to_queue"`
	// Invocations counts each function's invocations over the run: what
	// a latency costs (compensate's per report, the fill's per minute).
	Invocations map[string]int `json:"invocations"`
}

// Latency is one group of the demo's latencies, in seconds.
type Latency struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_s"`
	P99  float64 `json:"p99_s"`
	MaxS float64 `json:"max_s"`
}
