# Sourced by check.sh and release.sh: the pinned tools of
# infra/deploy/requirements.txt in the git-ignored venv .local/venv, put
# first on PATH. The venv is rebuilt only when that file changes (a stamp
# holds the file's hash). Expects ROOT (the repository) and log/die.
REQ="infra/deploy/requirements.txt"
VENV=".local/venv"
STAMP="$VENV/.requirements.sha256"
PYTHON="${PYTHON:-python3}"

want="$(sha256sum "$ROOT/$REQ" | cut -d' ' -f1)"
have="$(cat "$ROOT/$STAMP" 2>/dev/null || true)"
if [[ "$want" != "$have" || ! -x "$ROOT/$VENV/bin/sam" || ! -x "$ROOT/$VENV/bin/cfn-lint" ]]; then
	if [[ "$PYTHON" == python3 ]]; then
		NEED_WHO="$(basename "$0")" bash "$ROOT/infra/stack/need.sh" python-venv || exit 1
	fi
	log "installing $(grep -v '^#' "$ROOT/$REQ" | xargs) into $VENV"
	# Start clean: a half-upgraded venv can mix incompatible versions.
	rm -rf "${ROOT:?}/$VENV"
	mkdir -p "$ROOT/.local"
	"$PYTHON" -m venv "$ROOT/$VENV"
	"$ROOT/$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$ROOT/$REQ"
	# Written last, so an interrupted install is redone next time.
	echo "$want" >"$ROOT/$STAMP"
fi
export PATH="$ROOT/$VENV/bin:$PATH"
# No telemetry. (SAM's weekly "newer version" look-up goes to PyPI with a
# 5 s timeout and is ignored when it fails, so it cannot break a check.)
export SAM_CLI_TELEMETRY=0

# sam_build DIR: the five bootstraps and the built template in DIR.
# --build-in-source: for BuildMethod makefile SAM otherwise copies the whole
# CodeUri (the repository root) into a scratch dir first, including .local/
# (a PostgreSQL data dir owned by another user, the venv) and node_modules:
# slow, and it fails on unreadable files. make runs in the checkout instead.
sam_build() {
	log "sam build ($(sam --version | awk '{print $NF}')) into $1"
	rm -rf "$1"
	sam build --template-file template.yaml --build-dir "$1" \
		--build-in-source --parallel >&2
}

# lint_all TEMPLATE...: lint on every template, two cfn-lint processes at
# once (each template costs cfn-lint about 2 s of one core; the machine
# has two).
lint_all() {
	local out rc
	set +e
	out="$(printf '%s\n' "$@" | xargs -P 2 -n "$(((${#} + 1) / 2))" cfn-lint 2>&1)"
	rc=$?
	set -e
	if [[ $rc -ne 0 || -n "$out" ]]; then
		printf '%s\n' "$out" >&2
		die "cfn-lint reported findings on $* (exit $rc)"
	fi
}

# lint TEMPLATE [cfn-lint options]: cfn-lint must print nothing. Its exit
# code is a bit mask that ignores informational findings; any output at all
# is a finding, so the check fails on output too.
lint() {
	local out rc
	set +e
	out="$(cfn-lint "$@" 2>&1)"
	rc=$?
	set -e
	if [[ $rc -ne 0 || -n "$out" ]]; then
		printf '%s\n' "$out" >&2
		die "cfn-lint $* reported findings (exit $rc)"
	fi
}
