#!/usr/bin/env bash
# make release: everything a release ships, in RELEASE_DIR (default dist/,
# git-ignored), emptied first:
#   outboxkeeper-<version>-<os>-<arch>   the CLI for linux/darwin x amd64/arm64
#   sam/                                 `sam build` output with the template's
#                                        Serverless Application Repository
#                                        metadata completed, LICENSE, README.md
#   SHA256SUMS                           every file above (sha256sum -c)
# then the same checks as check.sh on them: checksums, cfn-lint, SAM's
# metadata validation. Publishing is the two AWS commands it prints
# (README: Deployment, Publishing a release).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
OUT="${RELEASE_DIR:-dist}"
BUILD_DIR=".local/release-build"

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'release.sh: %s\n' "$*" >&2; exit 1; }

# shellcheck source=venv.sh
source infra/deploy/venv.sh

sam_build "$BUILD_DIR"
log "building the release into $OUT"
go run ./infra/cmd/release -sam-build "$BUILD_DIR" -out "$OUT"
(cd "$OUT" && sha256sum --quiet -c SHA256SUMS) || die "the checksums do not verify"
lint "$OUT/sam/template.yaml"
python - "$OUT/sam/template.yaml" <<'PY' || die "sam publish would refuse the template's metadata"
import sys
from samcli.yamlhelper import yaml_parse
from samcli.vendor.serverlessrepo.parser import get_app_metadata
with open(sys.argv[1]) as f:
    get_app_metadata(yaml_parse(f.read())).validate(["name", "description", "author", "semantic_version"])
PY
version="$(cat internal/version/VERSION)"
log "release $version: $(wc -l <"$OUT/SHA256SUMS") files, checksums and cfn-lint pass"
(cd "$OUT" && find . -type f ! -name SHA256SUMS -printf '%10s  %P\n' | sort -k2) >&2
cat >&2 <<MSG

To publish $version to the Serverless Application Repository (an S3 bucket
in the target region whose policy lets serverlessrepo.amazonaws.com read):
  sam package --template-file $OUT/sam/template.yaml --s3-bucket BUCKET \\
      --output-template-file $OUT/packaged.yaml
  sam publish --template $OUT/packaged.yaml --region REGION
MSG
