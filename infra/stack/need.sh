#!/usr/bin/env bash
# What the local stack, the demo and the tests need from the machine, and
# getting it: `bash infra/stack/need.sh NAME...` (the Makefile's targets)
# or sourced, then `need NAME...` (up.sh). Each NAME is checked; one that
# is missing is installed when we run as root on a machine with apt-get
# (apt-get update once first, non-interactive, quiet), and otherwise named
# in one line, with the package to install, and need fails. Nothing is
# ever upgraded or removed. The README's "Two commands" lists the same.
#
# NAMEs: postgres (server binaries, pg_config on PATH), pgbouncer, curl,
# npm, node20 (Node.js 20 or newer), go, gcc (with libc headers, for
# go test -race), python-venv (python3 that can make a virtualenv).
#
# OUTBOXKEEPER_SBIN_PATH: where daemons are looked for beyond PATH
# (default /usr/local/sbin:/usr/sbin:/sbin; a user's PATH often lacks
# them), so a test can look somewhere the real package is not.

NEED_SBIN=${OUTBOXKEEPER_SBIN_PATH-/usr/local/sbin:/usr/sbin:/sbin}
NEED_WHO=${NEED_WHO:-need}

need_log() { printf '%s: %s\n' "$NEED_WHO" "$*" >&2; }

# find_cmd NAME: the path of NAME on PATH or in NEED_SBIN.
find_cmd() { PATH="$PATH${NEED_SBIN:+:$NEED_SBIN}" command -v "$1" 2>/dev/null; }

can_apt() { [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; }

NEED_APT_UPDATED=
apt_install() {
  if [[ -z $NEED_APT_UPDATED ]]; then
    need_log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null >&2 || return 1
    NEED_APT_UPDATED=1
  fi
  need_log "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" </dev/null >&2
}

# provide WHAT PACKAGE...: install the packages, or say in one line what
# is missing and how to get it. Fails unless they were installed.
provide() {
  local what=$1; shift
  if can_apt; then
    apt_install "$@" && return 0
    need_log "$what is not installed, and apt-get install $* failed (see above)"
    return 1
  fi
  if command -v apt-get >/dev/null 2>&1; then
    need_log "$what is not installed: install it with sudo apt-get install $* (as root, make installs it itself)"
  else
    need_log "$what is not installed: install $* with this machine's package manager"
  fi
  return 1
}

# version_at_least MAJOR TEXT: the first number in TEXT is MAJOR or more.
version_at_least() {
  [[ $2 =~ ([0-9]+) ]] && (( BASH_REMATCH[1] >= $1 ))
}

# pg_server_bin: the server binaries' directory, from pg_config.
pg_server_bin() {
  local bin
  bin=$(pg_config --bindir 2>/dev/null) || return 1
  [[ -x $bin/initdb && -x $bin/pg_ctl ]] && printf '%s' "$bin"
}

need_postgres() {
  local bin
  if ! bin=$(pg_server_bin); then
    provide "the PostgreSQL server (initdb, pg_ctl and pg_config)" postgresql || return 1
    bin=$(pg_server_bin) || { need_log "postgresql is installed but pg_config --bindir has no initdb"; return 1; }
  fi
  if ! version_at_least 13 "$("$bin/initdb" --version)"; then
    need_log "PostgreSQL 13 or newer is needed; $bin/initdb is $("$bin/initdb" --version)"
    return 1
  fi
  PG_BIN=$bin
}

# need_cmd COMMAND WHAT PACKAGE...: COMMAND found, or its packages
# installed; sets NEED_FOUND to its path.
need_cmd() {
  local cmd=$1 what=$2; shift 2
  NEED_FOUND=$(find_cmd "$cmd") && return 0
  provide "$what" "$@" || return 1
  NEED_FOUND=$(find_cmd "$cmd") && return 0
  need_log "$* installed, but $cmd is still not found"
  return 1
}

need_one() {
  case $1 in
    postgres) need_postgres ;;
    pgbouncer) need_cmd pgbouncer pgbouncer pgbouncer && PGBOUNCER_BIN=$NEED_FOUND ;;
    curl) need_cmd curl curl curl ;;
    npm) need_cmd npm "npm (Node.js)" npm ;;
    node20)
      need_cmd node Node.js nodejs || return 1
      version_at_least 20 "$(node --version)" && return 0
      need_log "Node.js 20 or newer is needed (examples/node); this one is $(node --version): install a newer one (https://nodejs.org, or NodeSource's packages)"
      return 1 ;;
    go)
      NEED_FOUND=$(find_cmd go) && return 0
      need_log "go is not installed: install Go (the version in go.mod or newer) from https://go.dev/dl"
      return 1 ;;
    gcc)
      # cgo, for go test -race, needs the C library's headers too.
      if find_cmd gcc >/dev/null && printf '#include <stdlib.h>\nint main(void){return 0;}\n' |
          gcc -x c -o /dev/null - >/dev/null 2>&1; then
        return 0
      fi
      provide "gcc with the C library headers (go test -race)" gcc libc6-dev ;;
    python-venv)
      need_cmd python3 python3 python3 || return 1
      python3 -c 'import ensurepip, venv' >/dev/null 2>&1 && return 0
      provide "python3's venv (with ensurepip)" python3-venv || return 1
      python3 -c 'import ensurepip, venv' >/dev/null 2>&1 && return 0
      need_log "python3-venv installed, but $(command -v python3) still cannot make a virtualenv (is it the system's python3?)"
      return 1 ;;
    *) need_log "unknown requirement $1"; return 2 ;;
  esac
}

# need NAME...: every one, in order; fails at the first that cannot be had.
need() {
  local name
  for name in "$@"; do
    need_one "$name" || return 1
  done
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  need "$@"
fi
