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

# What a target needs from the machine, got first: as root with apt-get,
# need.sh installs what is missing; otherwise it names it in one line and
# the target stops (infra/stack/need.sh; the README lists the same).
NEED := bash infra/stack/need.sh

# Every target that talks to the local stack reads its endpoints from here.
STACK_ENV := .local/stack.env
WITH_STACK = set -a; source $(STACK_ENV); set +a;

# sam build runs build-<LogicalId> for each function; its package is the
# id without "Function", in lower case (FillFunction: ./functions/fill).
FUNCTIONS := Fill Sweep Compensate Prune Relay Deliver Migrate
BUILD_TARGETS := $(FUNCTIONS:%=build-%Function)
.PHONY: $(BUILD_TARGETS)
$(BUILD_TARGETS): build-%Function:
	$(LAMBDA_ENV) $(GO) build $(LAMBDA_FLAGS) -o $(ARTIFACTS_DIR)/bootstrap ./functions/$(shell printf %s '$*' | tr A-Z a-z)

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
# The layers that time proofs and hand-overs (test-go, test-pgbouncer) run
# one after the other, alone on the cluster; the three that assert no
# timing and hold no transaction open (the small benchmarks, the fuzzers,
# the template checks) then run side by side.
.PHONY: test test-go test-pgbouncer test-bench test-template test-fuzz test-side-by-side vet
test: stack-up examples vet test-go test-pgbouncer test-side-by-side

test-side-by-side:
	$(MAKE) --no-print-directory -j3 --output-sync=target test-bench test-fuzz test-template

# The Python and Node.js examples' own dependencies, at the versions their
# requirements.txt and package-lock.json pin, installed inside the project
# (a virtualenv under .local, examples/node/node_modules); redone only when
# those files change. examples/examples_test.go runs them under test-go.
EXAMPLES_VENV := .local/venv-examples
.PHONY: examples
examples: $(EXAMPLES_VENV)/.installed examples/node/node_modules/.installed
$(EXAMPLES_VENV)/.installed: examples/python/requirements.txt
	$(NEED) python-venv
	rm -rf $(EXAMPLES_VENV)
	python3 -m venv $(EXAMPLES_VENV)
	$(EXAMPLES_VENV)/bin/pip install --quiet --disable-pip-version-check -r examples/python/requirements.txt
	touch $@
examples/node/node_modules/.installed: examples/node/package-lock.json
	$(NEED) npm node20
	cd examples/node && npm ci --no-audit --no-fund
	touch $@

vet:
	$(NEED) go
	$(GO) vet ./...

# -p 1: one test binary at a time. The fill's abandonment proof waits for
# the cluster-wide xmin horizon, so a transaction another package's test
# holds open (in any database of the cluster) would stall fill tests running
# beside it. Within a package tests run in parallel, except shared/fill's
# tests that hold an xid across a pass (see its fill_test.go).
# -race: the demo, the local event source mapping and the outbox helpers are
# concurrent code; the race detector needs cgo (gcc and the C headers).
test-go:
	$(NEED) gcc postgres
	$(WITH_STACK) $(GO) test -race -count=1 -p 1 -timeout 15m ./...

# The passes' integration tests and the functions' end-to-end tests once
# more, with the code under test reaching PostgreSQL through PgBouncer in
# transaction mode (the local stand-in for RDS Proxy), as it must work with
# no setting of its own.
PGBOUNCER_PACKAGES := ./shared/fill ./shared/sweep ./shared/compensate ./shared/prune ./shared/relay ./shared/deliver ./shared/outbox ./functions/...
test-pgbouncer:
	$(NEED) gcc
	$(WITH_STACK) OUTBOXKEEPER_TEST_VIA=pgbouncer $(GO) test -race -count=1 -p 1 -timeout 10m $(PGBOUNCER_PACKAGES)

# The report parser faces arbitrary bodies from SQS, the configuration
# loader whatever a deployment sets: fuzz each for a bounded time on every
# run. Their committed corpora (testdata/fuzz) also run inside test-go.
test-fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 20s ./shared/report
	$(GO) test -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime 15s ./shared/config

# cfn-lint (no errors, no warnings) on the template under every parameter
# combination of infra/deploy/combinations.txt, `sam build`, and the
# release's SAM artifacts, from a pinned virtualenv.
test-template:
	bash infra/deploy/check.sh

# Everything a release ships, in dist/ (RELEASE_DIR): the CLI for
# linux/darwin x amd64/arm64, built in parallel, the `sam build` output with
# the Serverless Application Repository metadata, SHA256SUMS; then its
# checks. `make test` builds two CLIs (the host's, whose --version its test
# runs, and darwin/arm64 for the cross-build: infra/cmd/release's test) and
# the SAM part (check.sh), not all four.
.PHONY: release
release:
	$(NEED) go
	bash infra/deploy/release.sh

# Every benchmark once, at its small size (-short), so none can rot; no
# timing is asserted (make bench judges the figures).
test-bench:
	$(WITH_STACK) $(GO) test -short -run '^$$' -bench . -benchtime 1x -count 1 -p 1 -timeout 10m ./...

# Every benchmark at full size, then the demo without its held transaction;
# writes BENCHMARKS.md (infra/cmd/bench). BENCHTIME repetitions of each
# comparison.
BENCHTIME ?= 5x
.PHONY: bench
bench: stack-up
	$(WITH_STACK) $(GO) run ./infra/cmd/bench -benchtime $(BENCHTIME)
