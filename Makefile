# outboxkeeper — build targets for `sam build` (BuildMethod: makefile), the
# local stack, the demo, the tests and the benchmarks.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

GO ?= go
# Lambda runs the functions on Graviton (arm64, provided.al2023).
LAMBDA_ENV := GOOS=linux GOARCH=arm64 CGO_ENABLED=0
# lambda.norpc drops the legacy RPC runtime (provided.* runtimes never use
# it); -s -w strip symbols, -trimpath keeps build paths out of the binary.
LAMBDA_FLAGS := -tags lambda.norpc -trimpath -ldflags='-s -w' -buildvcs=false

# Every target that talks to the local stack reads its endpoints from here.
STACK_ENV := .local/stack.env
WITH_STACK = set -a; source $(STACK_ENV); set +a;

.PHONY: build-FillFunction build-SweepFunction build-CompensateFunction build-MigrateFunction
build-FillFunction:
	$(LAMBDA_ENV) $(GO) build $(LAMBDA_FLAGS) -o $(ARTIFACTS_DIR)/bootstrap ./functions/fill
build-SweepFunction:
	$(LAMBDA_ENV) $(GO) build $(LAMBDA_FLAGS) -o $(ARTIFACTS_DIR)/bootstrap ./functions/sweep
build-CompensateFunction:
	$(LAMBDA_ENV) $(GO) build $(LAMBDA_FLAGS) -o $(ARTIFACTS_DIR)/bootstrap ./functions/compensate
build-MigrateFunction:
	$(LAMBDA_ENV) $(GO) build $(LAMBDA_FLAGS) -o $(ARTIFACTS_DIR)/bootstrap ./functions/migrate

# The README's first command: sets everything up from a fresh clone, runs
# the bounded demo (DEMO_DURATION, default 60s) and prints the verdict.
.PHONY: demo up down
demo: stack-up
	$(WITH_STACK) $(GO) run ./infra/cmd/demo

# The functions under aws-lambda-rie, scheduled and fed from SQS, left
# running in the background (pid file in .local/up/); `make down` stops it.
up: stack-up
	$(WITH_STACK) $(GO) run ./infra/cmd/up
down:
	$(GO) run ./infra/cmd/up -down

.PHONY: stack-up stack-down migrate
stack-up:
	bash infra/stack/up.sh
stack-down:
	bash infra/stack/down.sh
# `outboxkeeper migrate up`. Against a database of your own (DATABASE_URL
# other than the local stack's, or DATABASE_SECRET_ARN) nothing local is
# started and nothing is written to .local/; otherwise the local stack's.
LOCAL_DATABASE_URL = $(shell bash -c 'source infra/stack/lib.sh && echo "$$LOCAL_DATABASE_URL"')
migrate:
	@if [[ -n "$${DATABASE_SECRET_ARN:-}" || ( -n "$${DATABASE_URL:-}" && "$${DATABASE_URL}" != '$(LOCAL_DATABASE_URL)' ) ]]; then \
		$(GO) run ./cmd/outboxkeeper migrate up; \
	else \
		bash infra/stack/up.sh && $(WITH_STACK) $(GO) run ./cmd/outboxkeeper migrate up; \
	fi

# The README's test command: starts what it needs, then runs every layer.
.PHONY: test test-go test-template test-fuzz vet
test: stack-up vet test-go test-fuzz test-template

vet:
	$(GO) vet ./...

# -p 1: one test binary at a time. The fill's abandonment proof waits for
# the cluster-wide xmin horizon, so a transaction another package's test
# holds open (in any database of the cluster) would stall fill tests running
# beside it. Within a package tests run in parallel, except shared/fill's
# tests that hold an xid across a pass (see its fill_test.go).
# -race: the demo, the local event source mapping and the outbox helpers are
# concurrent code; the race detector needs cgo (gcc, checked by .ci/run).
test-go:
	$(WITH_STACK) $(GO) test -race -count=1 -p 1 -timeout 15m ./...

# The report parser faces arbitrary bodies from SQS: fuzz it for a bounded
# time on every run (its seed corpus also runs inside test-go).
test-fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 20s ./shared/report

# cfn-lint (no errors, no warnings) and `sam build` from a pinned virtualenv.
test-template:
	bash infra/deploy/check.sh

.PHONY: bench
bench: stack-up
	$(WITH_STACK) $(GO) test -run '^$$' -bench . -benchtime 3x ./...
