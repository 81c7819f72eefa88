#!/usr/bin/env bash
# Template checks (docs/design.md §8):
#   - cfn-lint prints nothing on template.yaml, with its defaults and with
#     each parameter combination of infra/deploy/combinations.txt;
#   - under each combination the SAM transform's own output carries the
#     account-policy knobs (infra/deploy/transformed.py);
#   - `sam build` produces seven ELF arm64 bootstrap binaries (fill, sweep,
#     compensate, prune, deliver, relay and migrate);
#   - the release's SAM artifacts (that build, with the Serverless
#     Application Repository metadata completed: infra/cmd/release) pass
#     cfn-lint too, and SAM's own metadata validation.
#
# Tools come from infra/deploy/requirements.txt (infra/deploy/venv.sh).
# Apart from that install (PyPI, and the Go module proxy for go build)
# nothing here touches the network or AWS.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

BUILD_DIR=".local/sam-build"
RELEASE_CHECK_DIR=".local/release-check"
FUNCTIONS=(FillFunction SweepFunction CompensateFunction PruneFunction DeliverFunction RelayFunction MigrateFunction)

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'check.sh: %s\n' "$*" >&2; exit 1; }

# shellcheck source=venv.sh
source infra/deploy/venv.sh

# --- sam build ----------------------------------------------------------------
# The build dir lives under .local so a user's own .aws-sam is left alone.
sam_build "$BUILD_DIR"

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

# --- the release's SAM artifacts -------------------------------------------------
# The same packaging `make release` does, without the CLI builds (the Go
# test of infra/cmd/release builds one, make release all four).
go run ./infra/cmd/release -targets "" -sam-build "$BUILD_DIR" -out "$RELEASE_CHECK_DIR"
(cd "$RELEASE_CHECK_DIR" && sha256sum --quiet -c SHA256SUMS) || die "the release's checksums do not verify"

# --- cfn-lint: no errors and no warnings, on every combination and the release --
# transformed.py checks the SAM transform under each combination and
# renders the template with the combination's values as the defaults;
# cfn-lint then lints them all, the template itself and the release's.
COMBINATIONS_DIR=".local/template-combinations"
rm -rf "$COMBINATIONS_DIR"
names="$(python infra/deploy/transformed.py template.yaml infra/deploy/combinations.txt "$COMBINATIONS_DIR")" ||
	die "the SAM transform under a combination lacks a knob (above)"
combinations=$(wc -w <<<"$names")
[[ $combinations -ge 3 ]] || die "infra/deploy/combinations.txt has $combinations combinations, want all off, all on and mixed ones"
log "cfn-lint $(cfn-lint --version 2>&1 | awk '{print $NF}'): template.yaml, its $combinations combinations ($(xargs <<<"$names")) and the release's"
lint_all template.yaml "$COMBINATIONS_DIR"/*.yaml "$RELEASE_CHECK_DIR/sam/template.yaml"

# What `sam publish` checks before it uploads anything.
python - "$RELEASE_CHECK_DIR/sam/template.yaml" <<'PY' || die "sam publish would refuse the release template's metadata"
import sys
from samcli.yamlhelper import yaml_parse
from samcli.vendor.serverlessrepo.parser import get_app_metadata
with open(sys.argv[1]) as f:
    meta = get_app_metadata(yaml_parse(f.read()))
meta.validate(["name", "description", "author", "semantic_version"])
PY
log "template checks passed ($combinations parameter combinations)"
