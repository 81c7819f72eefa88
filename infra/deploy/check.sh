#!/usr/bin/env bash
# Template checks (docs/design.md §8): cfn-lint must print nothing, and
# `sam build` must produce five ELF arm64 bootstrap binaries (fill, sweep,
# compensate, prune and migrate).
#
# Tools come from infra/deploy/requirements.txt, installed into the
# git-ignored venv .local/venv; it is rebuilt only when that file changes
# (a stamp holds the file's hash). Apart from that install (PyPI, and the Go
# module proxy for go build) nothing here touches the network or AWS.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

REQ="infra/deploy/requirements.txt"
VENV=".local/venv"
STAMP="$VENV/.requirements.sha256"
BUILD_DIR=".local/sam-build"
FUNCTIONS=(FillFunction SweepFunction CompensateFunction PruneFunction MigrateFunction)
PYTHON="${PYTHON:-python3}"

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'check.sh: %s\n' "$*" >&2; exit 1; }

# --- tools -----------------------------------------------------------------
want="$(sha256sum "$REQ" | cut -d' ' -f1)"
have="$(cat "$STAMP" 2>/dev/null || true)"
if [[ "$want" != "$have" || ! -x "$VENV/bin/sam" || ! -x "$VENV/bin/cfn-lint" ]]; then
	if [[ "$PYTHON" == python3 ]]; then
		NEED_WHO=check.sh bash infra/stack/need.sh python-venv || exit 1
	fi
	log "installing $(grep -v '^#' "$REQ" | xargs) into $VENV"
	# Start clean: a half-upgraded venv can mix incompatible versions.
	rm -rf "$VENV"
	mkdir -p .local
	"$PYTHON" -m venv "$VENV"
	"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQ"
	# Written last, so an interrupted install is redone next time.
	echo "$want" >"$STAMP"
fi
export PATH="$ROOT/$VENV/bin:$PATH"
# No telemetry. (SAM's weekly "newer version" look-up goes to PyPI with a
# 5 s timeout and is ignored when it fails, so it cannot break the check.)
export SAM_CLI_TELEMETRY=0

# --- cfn-lint: no errors and no warnings --------------------------------------
log "cfn-lint $(cfn-lint --version 2>&1 | awk '{print $NF}') template.yaml"
# cfn-lint's exit code is a bit mask that ignores informational findings;
# any output at all is a finding, so the check fails on output too.
set +e
lint_out="$(cfn-lint template.yaml 2>&1)"
lint_rc=$?
set -e
if [[ $lint_rc -ne 0 || -n "$lint_out" ]]; then
	printf '%s\n' "$lint_out" >&2
	die "cfn-lint reported findings (exit $lint_rc)"
fi

# --- sam build ----------------------------------------------------------------
# --build-in-source: for BuildMethod makefile SAM otherwise copies the whole
# CodeUri (the repository root) into a scratch dir first, including .local/
# (a PostgreSQL data dir owned by another user, the venv) and node_modules:
# slow, and it fails on unreadable files. make runs in the checkout instead.
# The build dir lives under .local so a user's own .aws-sam is left alone.
log "sam build ($(sam --version | awk '{print $NF}'))"
rm -rf "$BUILD_DIR"
sam build --template-file template.yaml --build-dir "$BUILD_DIR" \
	--build-in-source --parallel >&2

# --- artifacts: ELF, 64-bit, little-endian, AArch64 -----------------------------
# Read the header bytes directly: `file` is not on every machine.
for fn in "${FUNCTIONS[@]}"; do
	bin="$BUILD_DIR/$fn/bootstrap"
	[[ -f "$bin" ]] || die "$bin missing"
	# Bytes 0-3 magic, 4 class (2 = 64-bit), 5 data (1 = little-endian),
	# 18-19 e_machine (0xb7 = EM_AARCH64, little-endian).
	read -r -a h <<<"$(od -An -tx1 -N20 -v "$bin" | tr -s " \n" "  ")"
	header="${h[0]}${h[1]}${h[2]}${h[3]} class=${h[4]} data=${h[5]} machine=${h[19]}${h[18]}"
	[[ "$header" == "7f454c46 class=02 data=01 machine=00b7" ]] ||
		die "$bin is not an ELF64 little-endian aarch64 binary ($header)"
	[[ -x "$bin" ]] || die "$bin is not executable"
	log "$fn: ELF aarch64, $(wc -c <"$bin") bytes"
done
log "template checks passed"
