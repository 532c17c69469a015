#!/usr/bin/env bash
# Starts and stops the real components the tests need (moto server for DynamoDB, PostgreSQL), on loopback only.
#
#   source scripts/services.sh; services_up; ...; services_down
#
# Installs what a fresh machine lacks: moto server and the Python tools the tests read outputs with
# (junitparser, jsonschema) into ./.venv, Debian's PostgreSQL with apt-get.
# A service whose URL is already set (ONCECHECK_DDB_ENDPOINT, ONCECHECK_PG_URL) is used as given
# and neither started nor stopped. Everything started here lives under ./.run/services.PID (this
# shell's own) and is stopped, and its directory removed, by services_down, which is safe to call
# twice.

ONCECHECK_ROOT=${ONCECHECK_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
RUN_DIR="$ONCECHECK_ROOT/.run"
# What this shell starts lives in a directory of its own: two shells of one checkout (a test
# run beside a mutation run) must not stop each other's servers or wipe each other's database.
SERVICES_DIR="$RUN_DIR/services.$BASHPID"
VENV_DIR="$ONCECHECK_ROOT/.venv"
MOTO_VERSION_SPEC=${MOTO_VERSION_SPEC:-"moto[server]>=5.1,<6"}

log() { printf '[services] %s\n' "$*" >&2; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

wait_for_port() { # host port seconds_max
  local deadline=$((SECONDS + $3))
  while ((SECONDS < deadline)); do
    if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then return 0; fi
    sleep 0.2
  done
  return 1
}

install_moto() {
  if [ -x "$VENV_DIR/bin/moto_server" ]; then return 0; fi
  log "installing $MOTO_VERSION_SPEC into $VENV_DIR"
  [ -x "$VENV_DIR/bin/pip" ] || python3 -m venv "$VENV_DIR"
  "$VENV_DIR/bin/pip" install --quiet --disable-pip-version-check "$MOTO_VERSION_SPEC"
}

# The Python tools the tests read oncecheck's outputs with, as a CI system would: junitparser
# loads the JUnit reports of `check --junit` and `replay --junit`; jsonschema (the reference
# validator) checks `check --json` against docs/check-json.schema.json. Installed even when the
# services are given by URL: the tests need them either way.
PYTHON_TOOLS_SPEC=("junitparser>=3,<6" "jsonschema>=4.18,<5")

install_python_tools() {
  if "$VENV_DIR/bin/python" -c 'import junitparser, jsonschema' 2>/dev/null; then return 0; fi
  log "installing ${PYTHON_TOOLS_SPEC[*]} into $VENV_DIR"
  [ -x "$VENV_DIR/bin/pip" ] || python3 -m venv "$VENV_DIR"
  "$VENV_DIR/bin/pip" install --quiet --disable-pip-version-check "${PYTHON_TOOLS_SPEC[@]}"
}

start_moto() {
  if [ -n "${ONCECHECK_DDB_ENDPOINT:-}" ]; then log "using DynamoDB at $ONCECHECK_DDB_ENDPOINT"; return 0; fi
  install_moto
  mkdir -p "$SERVICES_DIR"
  local port; port=$(free_port)
  "$VENV_DIR/bin/moto_server" -H 127.0.0.1 -p "$port" >"$SERVICES_DIR/moto.log" 2>&1 &
  echo $! >"$SERVICES_DIR/moto.pid"
  if ! wait_for_port 127.0.0.1 "$port" 60; then log "moto server did not start; see $SERVICES_DIR/moto.log"; return 1; fi
  export ONCECHECK_DDB_ENDPOINT="http://127.0.0.1:$port"
  # The SDK wants credentials and a region even for a local endpoint.
  export AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-testing} AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-testing}
  export AWS_REGION=${AWS_REGION:-us-east-1}
  log "moto server at $ONCECHECK_DDB_ENDPOINT (pid $(cat "$SERVICES_DIR/moto.pid"))"
}

pg_bin_dir() {
  local dir
  for dir in /usr/lib/postgresql/*/bin; do [ -x "$dir/initdb" ] && { echo "$dir"; return 0; }; done
  return 1
}

install_postgres() {
  if pg_bin_dir >/dev/null; then return 0; fi
  log "installing Debian's postgresql"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq postgresql >/dev/null
  pg_bin_dir >/dev/null
}

# The HTML report's test opens the report in a real headless browser: Debian's chromium.
install_chromium() {
  if command -v chromium >/dev/null; then return 0; fi
  log "installing Debian's chromium"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq chromium >/dev/null
  command -v chromium >/dev/null
}

start_postgres() {
  if [ -n "${ONCECHECK_PG_URL:-}" ]; then log "using PostgreSQL at $ONCECHECK_PG_URL"; return 0; fi
  install_postgres
  local bin; bin=$(pg_bin_dir)
  local data="$SERVICES_DIR/pgdata" port; port=$(free_port)
  mkdir -p "$SERVICES_DIR"
  rm -rf "$data"
  mkdir -p "$data"
  # PostgreSQL refuses to run as root: run it as an unprivileged user when we are root.
  local as=()
  if [ "$(id -u)" = 0 ]; then
    id -u postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    chown -R postgres "$data"
    chmod 755 "$RUN_DIR" "$SERVICES_DIR"
    as=(runuser -u postgres --)
  fi
  "${as[@]}" "$bin/initdb" -D "$data" -U oncecheck --auth=trust >"$SERVICES_DIR/initdb.log" 2>&1 \
    || { log "initdb failed; see $SERVICES_DIR/initdb.log"; return 1; }
  "${as[@]}" "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 \
    -o "-h 127.0.0.1 -p $port -k '' -c max_connections=200 -c fsync=off" start >/dev/null \
    || { log "postgres did not start; see $data/server.log"; return 1; }
  echo "$data" >"$SERVICES_DIR/pgdata.path"
  export ONCECHECK_PG_URL="postgres://oncecheck@127.0.0.1:$port/postgres"
  log "PostgreSQL at $ONCECHECK_PG_URL"
}

services_up() {
  install_python_tools && start_moto && start_postgres
}

# Stops moto and waits for it to be gone: a moto that grew large (the DynamoDB soak leaves it at
# gigabytes) can run on for many seconds after SIGTERM, and a caller that starts the next moto or
# reports done must not leave it behind. After 20 s of waiting, SIGKILL.
stop_moto() {
  # SIGKILL at once: moto keeps nothing worth a clean exit (its tables live in memory and die
  # with it), and after a test run holding gigabytes of table versions its SIGTERM exit took
  # about 20 s of the test command's wall time. Waited for, so nothing is left running.
  local pid; pid=$(cat "$SERVICES_DIR/moto.pid")
  kill -9 "$pid" 2>/dev/null || true
  local waited=0
  while kill -0 "$pid" 2>/dev/null && ((waited < 100)); do sleep 0.1; waited=$((waited + 1)); done
  if kill -0 "$pid" 2>/dev/null; then log "moto (pid $pid) still running 10 s after SIGKILL"; fi
  rm -f "$SERVICES_DIR/moto.pid"
}

services_down() {
  if [ -f "$SERVICES_DIR/moto.pid" ]; then stop_moto; fi
  if [ -f "$SERVICES_DIR/pgdata.path" ]; then
    local bin data; bin=$(pg_bin_dir); data=$(cat "$SERVICES_DIR/pgdata.path")
    if [ "$(id -u)" = 0 ]; then
      runuser -u postgres -- "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1 || true
    else
      "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1 || true
    fi
    rm -f "$SERVICES_DIR/pgdata.path"
  fi
  rm -rf "$SERVICES_DIR"
}
