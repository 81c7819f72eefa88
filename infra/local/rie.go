package local

import "github.com/outboxkeeper/outboxkeeper/internal/testkit/rie"

// Function is one function running under aws-lambda-rie; package rie
// starts, invokes and stops it (the test harness uses the same code).
type Function = rie.Function
