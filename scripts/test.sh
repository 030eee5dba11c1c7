#!/usr/bin/env bash
# Runs the whole test suite, setting up what it needs first:
#   - PostgreSQL: a cluster of this run's own (Debian's postgresql, installed if missing), made
#     with initdb in memory on a free loopback port, deleted on exit (ARCHIVIST_TEST_PG_URL
#     names another server instead).
#   - RabbitMQ: a node of this run's own (Debian's rabbitmq-server, installed if missing) with
#     its data in a temporary directory, on a free loopback port, killed and deleted on exit.
#   - An SQS-compatible server: moto_server (PyPI `moto[server]`) in a virtualenv under
#     ~/.cache/archivist, started on a free loopback port and stopped on exit.
#   - A browser for the status page's test: Debian's chromium, installed if missing.
#   - ffmpeg for the analyser's tests (MP3, AAC, Ogg and FLAC made from generated WAVs):
#     Debian's ffmpeg, installed if missing.
#   - libopus for the analyser's Opus decoder (linked, not built: Debian's libopus-dev, installed
#     if missing, before anything is compiled).
#   - mdBook, to build the book in docs/ (cargo install, when missing).
# Then: formatting, clippy with warnings as errors, the crates' documentation (rustdoc) with
# warnings as errors, and every test of the workspace, doc tests included.
# Backend tests never skip: without these variables they fail and say to run this script.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each line says how long the run has taken so far (bash's SECONDS), so that a slow phase shows.
log() { printf '\033[1m== [%dm%02ds] %s\033[0m\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*" >&2; }
cleanup_cmds=()
cleanup() { for c in "${cleanup_cmds[@]}"; do eval "$c" || true; done; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# ---------------------------------------------------------------- PostgreSQL
# A cluster of this run's own (Debian's postgresql, installed if missing), made with initdb in
# memory (/dev/shm) on a free loopback port, stopped and deleted on exit, as the RabbitMQ node
# below. Not the machine's shared server: that one keeps what earlier runs left, may run with
# other settings (autovacuum off, 100 connections), and syncs every commit to disk. The tests
# create a database each (several hundred in a run) and check behaviour, never durability
# across a power cut, so this cluster does not sync (fsync and full_page_writes off; the
# other settings are the server's defaults, which tests check): a fresh migrated database
# took about half the time of the shared server's here. ARCHIVIST_TEST_PG_URL, when set, names a server to use instead.
if [ -z "${ARCHIVIST_TEST_PG_URL:-}" ]; then
  if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    log "installing the PostgreSQL server (apt)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
  PGBIN=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -1)")
  PG_DIR=$(mktemp -d "$( [ -d /dev/shm ] && [ -w /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")/archivist-postgres.XXXXXX")
  PG_PORT=$(free_port)
  as_pg() { if [ "$(id -u)" = 0 ]; then su postgres -s /bin/bash -c "$*"; else bash -c "$*"; fi; }
  [ "$(id -u)" = 0 ] && chown postgres "$PG_DIR"
  cleanup_cmds+=("as_pg '$PGBIN/pg_ctl -D $PG_DIR/data -m immediate stop' >/dev/null 2>&1; rm -rf '$PG_DIR'")
  log "starting a PostgreSQL cluster of this run's own on 127.0.0.1:$PG_PORT"
  as_pg "$PGBIN/initdb -D $PG_DIR/data -U postgres -A trust" >"$PG_DIR.initdb.log" 2>&1 \
    || { cat "$PG_DIR.initdb.log" >&2; exit 1; }
  rm -f "$PG_DIR.initdb.log"
  as_pg "$PGBIN/pg_ctl -D $PG_DIR/data -l $PG_DIR/log -w start -o '-p $PG_PORT -k $PG_DIR -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=off -c full_page_writes=off'" >/dev/null \
    || { cat "$PG_DIR/log" >&2; echo "PostgreSQL did not start on 127.0.0.1:$PG_PORT" >&2; exit 1; }
  psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -qc 'CREATE DATABASE test' postgres >/dev/null
  # Tests create (and drop) a database of their own through this administrative URL.
  export ARCHIVIST_TEST_PG_URL=postgres://postgres@127.0.0.1:$PG_PORT/test
else
  # A server of the caller's: a test process killed outright cannot drop its database; sweep
  # such leftovers. Only those nobody is connected to: another run may be using it.
  for db in $(psql "$ARCHIVIST_TEST_PG_URL" -Atc "SELECT datname FROM pg_database d WHERE datname LIKE 'archivist\_t\_%' AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datname = d.datname)" 2>/dev/null); do
    psql "$ARCHIVIST_TEST_PG_URL" -qc "DROP DATABASE IF EXISTS \"$db\"" >/dev/null 2>&1 || true
  done
fi

# ---------------------------------------------------------------- moto_server (SQS)
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/archivist
VENV=$CACHE/moto-venv
# 5.2.2 at least: earlier ones answer CompleteMultipartUpload with a root element S3 does not
# use, which the AWS SDK refuses (the media archive's multipart uploads). An older one is
# upgraded.
moto_ok() {
  "$VENV/bin/python" -c 'import sys, importlib.metadata as m; sys.exit(tuple(int(x) for x in m.version("moto").split(".")[:3]) < (5, 2, 2))' 2>/dev/null
}
if [ ! -x "$VENV/bin/moto_server" ] || ! moto_ok; then
  log "installing moto[server] into $VENV"
  mkdir -p "$CACHE"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check --upgrade 'moto[server]>=5.2.2,<6'
fi
MOTO_PORT=$(free_port)
"$VENV/bin/moto_server" -H 127.0.0.1 -p "$MOTO_PORT" >"$CACHE/moto.log" 2>&1 &
MOTO_PID=$!
cleanup_cmds+=("kill $MOTO_PID 2>/dev/null")
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$MOTO_PORT/moto-api/" >/dev/null 2>&1 && break
  kill -0 "$MOTO_PID" 2>/dev/null || { cat "$CACHE/moto.log" >&2; exit 1; }
  sleep 0.2
done
export ARCHIVIST_TEST_SQS_ENDPOINT=http://127.0.0.1:$MOTO_PORT
export AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing
log "PostgreSQL at ${ARCHIVIST_TEST_PG_URL#*@}, moto_server at $ARCHIVIST_TEST_SQS_ENDPOINT"

# ---------------------------------------------------------------- RabbitMQ
# A broker of this run's own: a RabbitMQ node started from the installed server (Debian's
# rabbitmq-server, installed if missing) with its data in a temporary directory, on free
# loopback ports, killed and deleted on exit. The machine's own broker carries whatever earlier
# runs left in it (thousands of quorum queues, a half-deleted virtual host) and was seen to stop
# answering mid-run under that load; a fresh node starts empty every time and nothing has to be
# deleted from it. ARCHIVIST_TEST_AMQP_URL, when set, names a broker to use instead.
if [ -z "${ARCHIVIST_TEST_AMQP_URL:-}" ]; then
  RMQ_BIN=/usr/lib/rabbitmq/bin
  if [ ! -x "$RMQ_BIN/rabbitmq-server" ]; then
    log "installing RabbitMQ (apt)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server >/dev/null
  fi
  RMQ_DIR=$(mktemp -d /tmp/archivist-rabbitmq.XXXXXX)
  RMQ_PORT=$(free_port)
  RMQ_NODE=archivist_test_$$@localhost
  : >"$RMQ_DIR/env.conf"                      # not the machine's node name and ports
  echo '[].' >"$RMQ_DIR/enabled_plugins"      # no management plugin: faster boot
  rmq_env=(env HOME="$RMQ_DIR" RABBITMQ_CONF_ENV_FILE="$RMQ_DIR/env.conf"
    RABBITMQ_NODENAME="$RMQ_NODE" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT="$RMQ_PORT"
    RABBITMQ_DIST_PORT="$(free_port)" RABBITMQ_CONFIG_FILE="$RMQ_DIR/rabbitmq.conf"
    RABBITMQ_MNESIA_BASE="$RMQ_DIR/mnesia" RABBITMQ_LOG_BASE="$RMQ_DIR/log"
    RABBITMQ_ENABLED_PLUGINS_FILE="$RMQ_DIR/enabled_plugins" RABBITMQ_PID_FILE="$RMQ_DIR/pid"
    ERL_EPMD_ADDRESS=127.0.0.1)
  echo 'loopback_users.guest = true' >"$RMQ_DIR/rabbitmq.conf"
  log "starting a RabbitMQ node of this run's own on 127.0.0.1:$RMQ_PORT"
  cleanup_cmds+=("[ -f '$RMQ_DIR/pid' ] && kill -9 \$(cat '$RMQ_DIR/pid') 2>/dev/null; rm -rf '$RMQ_DIR'")
  "${rmq_env[@]}" "$RMQ_BIN/rabbitmq-server" -detached >"$RMQ_DIR/start.log" 2>&1 || true
  export ARCHIVIST_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:$RMQ_PORT/%2f
  # The node boots (about 20 s) while the checks and the build run; awaited before the tests.
  await_rabbitmq() {
    # -detached returns at once; the node registers a moment later (rabbitmqctl fails at once
    # on a node not registered yet), and its AMQP port opens last.
    for _ in $(seq 1 240); do
      (exec 3<>"/dev/tcp/127.0.0.1/$RMQ_PORT") 2>/dev/null && break
      sleep 0.5
    done
    if ! "${rmq_env[@]}" timeout 120 "$RMQ_BIN/rabbitmqctl" -n "$RMQ_NODE" await_startup >>"$RMQ_DIR/start.log" 2>&1; then
      cat "$RMQ_DIR/start.log" "$RMQ_DIR"/log/*.log >&2 2>/dev/null || true
      echo "RabbitMQ did not start on 127.0.0.1:$RMQ_PORT" >&2
      exit 1
    fi
    log "RabbitMQ up at 127.0.0.1:$RMQ_PORT"
  }
else
  await_rabbitmq() { log "RabbitMQ at ${ARCHIVIST_TEST_AMQP_URL#*@}"; }
fi

# ---------------------------------------------------------------- a browser
# The status page is tested in a real headless browser (bin/tests/e2e/status_page.rs): Debian's
# Chromium, installed when missing. Without it that test fails; it never skips.
if ! command -v chromium >/dev/null; then
  log "installing Chromium (apt)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
log "$(chromium --version 2>/dev/null | head -n 1)"

# ---------------------------------------------------------------- libopus
# The analyser decodes Opus with libopus (symphonia-adapter-libopus, linked to the system's
# library): every build of the workspace links it.
if ! pkg-config --exists opus 2>/dev/null; then
  log "installing libopus-dev (apt)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopus-dev pkg-config >/dev/null
fi

# ---------------------------------------------------------------- ffmpeg
# The analyser's tests (analysis/tests/formats.rs, bin/tests/e2e/analyse.rs) encode their
# generated audio with ffmpeg. Without it those tests fail; they never skip.
if ! command -v ffmpeg >/dev/null; then
  log "installing ffmpeg (apt)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ffmpeg >/dev/null
fi
log "$(ffmpeg -version 2>/dev/null | head -n 1)"

# ---------------------------------------------------------------- the book
# docs/ is an mdBook; it is built here (into a temporary directory) so that a chapter that no
# longer renders fails the run. Its links are checked by tests/suite/book_links.rs.
if ! command -v mdbook >/dev/null; then
  log "installing mdBook (cargo install)"
  cargo install mdbook --locked --version 0.5.4 --quiet
fi
log "mdbook build docs"
BOOK_OUT=$(mktemp -d)
cleanup_cmds+=("rm -rf '$BOOK_OUT'")
mdbook build docs -d "$BOOK_OUT/book" 2>&1 | grep -v '^ INFO' || true
[ -f "$BOOK_OUT/book/index.html" ] || { echo "the book did not build" >&2; exit 1; }

# ---------------------------------------------------------------- checks and tests
log "cargo fmt --check"
cargo fmt --all -- --check
log "cargo clippy"
cargo clippy --workspace --all-targets --all-features --quiet -- -D warnings
# Broken and private intra-doc links fail here. Its dependencies' metadata is built with the
# libraries' features, apart from clippy's (which has the tests'): minutes the first time on a
# fresh target directory, under a minute afterwards.
log "cargo doc"
RUSTDOCFLAGS='-D warnings' cargo doc --no-deps --workspace --all-features --quiet
# Built first on its own (the same targets nextest builds), so that the log tells the build's
# time from the tests'.
log "building the tests"
cargo test --workspace --all-features --no-run --quiet
await_rabbitmq
log "tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --all-features --no-fail-fast "$@"
  log "doc tests"
  cargo test --workspace --all-features --doc --quiet
else
  cargo test --workspace --all-features --no-fail-fast "$@"
fi
log "done"

