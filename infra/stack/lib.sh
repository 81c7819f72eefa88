# Shared settings for up.sh and down.sh; sourced, never run.
# Both scripts must compute the same paths, so they live in one place.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LOCAL="$ROOT/.local"
PIDS="$LOCAL/pids"
LOGS="$LOCAL/logs"

# Not 5432, so a system cluster never clashes. Overridable to run a second
# checkout's stack beside this one.
PG_PORT=${OUTBOXKEEPER_PG_PORT:-55432}
SQS_PORT=${OUTBOXKEEPER_SQS_PORT:-59324}
# Next to SQS's, so a checkout that moved its SQS port moves these too.
KINESIS_PORT=${OUTBOXKEEPER_KINESIS_PORT:-$((SQS_PORT + 1))}
MOTO_PORT=${OUTBOXKEEPER_MOTO_PORT:-$((SQS_PORT + 2))}
PGBOUNCER_PORT=${OUTBOXKEEPER_PGBOUNCER_PORT:-$((PG_PORT + 1000))}
RIE_VERSION=v0.0.0-20261030222936-bef5c4ba774d  # pinned; v1.x tags are not served by the proxy here
LOCAL_DATABASE_URL="postgres://postgres@127.0.0.1:${PG_PORT}/postgres?sslmode=disable"
# The same cluster through PgBouncer in transaction mode, the local
# stand-in for RDS Proxy.
LOCAL_PGBOUNCER_URL="postgres://postgres@127.0.0.1:${PGBOUNCER_PORT}/postgres?sslmode=disable"

# The server binaries (up.sh's need postgres sets it again after an
# install); down.sh only needs the pg_ctl that started the cluster.
PG_BIN=$(pg_config --bindir 2>/dev/null || true)
if [[ -z "$PG_BIN" || ! -x "$PG_BIN/pg_ctl" ]]; then
  PG_BIN=$(dirname "$(command -v pg_ctl 2>/dev/null || ls -d /usr/lib/postgresql/*/bin/pg_ctl 2>/dev/null | sort -V | tail -1 || true)")
fi

# PostgreSQL refuses to run as root, so as root the cluster belongs to an
# unprivileged user and every server command runs through runuser.
if [[ $(id -u) -eq 0 ]]; then
  PG_USER=postgres
  # cd /: the unprivileged user may not be able to enter the checkout.
  as_pg() { (cd / && runuser -u "$PG_USER" -- "$@"); }
else
  PG_USER=$(id -un)
  as_pg() { "$@"; }
fi

# The cluster lives in .local/pg unless the unprivileged user cannot reach it
# (a checkout under a 0700 home such as /root): then in a /tmp folder whose
# name derives from the checkout path, so down.sh finds the same one.
pg_dir() {
  local dir="$LOCAL/pg"
  if [[ $(id -u) -eq 0 ]] && id "$PG_USER" >/dev/null 2>&1 \
     && ! runuser -u "$PG_USER" -- test -x "$LOCAL" 2>/dev/null; then
    dir="/tmp/outboxkeeper-pg.$(printf %s "$ROOT" | md5sum | cut -c1-12)"
  fi
  printf %s "$dir"
}

# A pid from a pid file counts as ours only while that process is alive and
# still runs the expected program (pids get reused after a reboot or crash).
pid_alive() { # pidfile pattern
  local pid
  [[ -s "$1" ]] || return 1
  pid=$(<"$1")
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$2"
}

# start_unless_running starts NAME with the command start unless ours runs
# already (its pid file and pattern) or, failing, when another process
# answers on its port (up says whether one does; hint says what to do).
# Called as a plain statement, so that set -e holds inside start and a
# refusal ends the script.
start_unless_running() { # name pattern up port hint start...
  local name=$1 pattern=$2 up=$3 port=$4 hint=$5
  shift 5
  if pid_alive "$PIDS/$name.pid" "$pattern"; then
    log "$name already running (pid $(<"$PIDS/$name.pid"))"
  elif "$up"; then
    log "port $port answers but not with our $name; $hint"
    return 1
  else
    "$@"
  fi
}

# await_exit waits up to 5 s for a signalled process to exit, then kills it.
await_exit() { # pid
  for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$1" 2>/dev/null && kill -KILL "$1" 2>/dev/null || true
}

# stop_started stops the process $PIDS/NAME.pid records, if it is alive and
# its command line matches pattern (never a process found by name): TERM,
# then KILL if it has not exited. The log line is "stopping NAME" unless
# given.
stop_started() { # name pattern [log line]
  local pid
  pid_alive "$PIDS/$1.pid" "$2" || return 0
  pid=$(<"$PIDS/$1.pid")
  log "${3:-stopping $1} (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  await_exit "$pid"
}
