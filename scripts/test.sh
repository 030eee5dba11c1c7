#!/usr/bin/env bash
# Runs the whole test suite, setting up what it needs first:
#   - PostgreSQL: uses the server on $ARCHIVIST_TEST_PG_HOST:$ARCHIVIST_TEST_PG_PORT (default
#     127.0.0.1:5432) if it answers; otherwise starts the machine's own cluster, or failing that
#     a throwaway one made with initdb in a temporary directory.
#   - RabbitMQ: a node of this run's own (Debian's rabbitmq-server, installed if missing) with
#     its data in a temporary directory, on a free loopback port, killed and deleted on exit.
#   - An SQS-compatible server: moto_server (PyPI `moto[server]`) in a virtualenv under
#     ~/.cache/archivist, started on a free loopback port and stopped on exit.
#   - A browser for the status page's test: Debian's chromium, installed if missing.
#   - ffmpeg for the analyser's tests (MP3, AAC, Ogg and FLAC made from generated WAVs):
#     Debian's ffmpeg, installed if missing.
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
PG_HOST=${ARCHIVIST_TEST_PG_HOST:-127.0.0.1}
PG_PORT=${ARCHIVIST_TEST_PG_PORT:-5432}
pg_up() { pg_isready -q -h "$PG_HOST" -p "$PG_PORT" 2>/dev/null; }
if ! command -v pg_isready >/dev/null; then
  log "installing the PostgreSQL client and server (apt)"
  apt-get update -qq && apt-get install -y -qq postgresql >/dev/null
fi
if ! pg_up; then
  if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ] && [ -n "$(ls /etc/postgresql 2>/dev/null)" ]; then
    log "starting the machine's PostgreSQL cluster"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
  fi
  for _ in $(seq 1 30); do pg_up && break; sleep 0.5; done
fi
if ! pg_up; then
  log "starting a throwaway PostgreSQL with initdb"
  PGBIN=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -1 || command -v initdb)")
  PGDATA_TMP=$(mktemp -d)
  chown postgres "$PGDATA_TMP" 2>/dev/null || true
  PG_PORT=$(free_port)
  as_pg() { if [ "$(id -u)" = 0 ]; then su postgres -c "$*"; else bash -c "$*"; fi; }
  as_pg "$PGBIN/initdb -D $PGDATA_TMP/data -U postgres -A trust >/dev/null"
  as_pg "$PGBIN/pg_ctl -D $PGDATA_TMP/data -o '-p $PG_PORT -k $PGDATA_TMP -c listen_addresses=127.0.0.1 -c max_connections=300' -l $PGDATA_TMP/log -w start >/dev/null"
  cleanup_cmds+=("as_pg '$PGBIN/pg_ctl -D $PGDATA_TMP/data -m fast stop' >/dev/null; rm -rf '$PGDATA_TMP'")
  psql -h "$PG_HOST" -p "$PG_PORT" -U postgres -c 'CREATE DATABASE test' postgres >/dev/null 2>&1 || true
fi
pg_up || { echo "PostgreSQL did not start on $PG_HOST:$PG_PORT" >&2; exit 1; }
# Tests create (and drop) a database of their own through this administrative URL.
export ARCHIVIST_TEST_PG_URL=${ARCHIVIST_TEST_PG_URL:-postgres://postgres@$PG_HOST:$PG_PORT/test}
# A test process killed outright cannot drop its database; sweep such leftovers. Only those
# nobody is connected to: another run of this script may be using the server at the same time.
for db in $(psql "$ARCHIVIST_TEST_PG_URL" -Atc "SELECT datname FROM pg_database d WHERE datname LIKE 'archivist\_t\_%' AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datname = d.datname)" 2>/dev/null); do
  psql "$ARCHIVIST_TEST_PG_URL" -qc "DROP DATABASE IF EXISTS \"$db\"" >/dev/null 2>&1 || true
done

# ---------------------------------------------------------------- moto_server (SQS)
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/archivist
VENV=$CACHE/moto-venv
if [ ! -x "$VENV/bin/moto_server" ]; then
  log "installing moto[server] into $VENV"
  mkdir -p "$CACHE"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check 'moto[server]>=5,<6'
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
log "PostgreSQL at $PG_HOST:$PG_PORT, moto_server at $ARCHIVIST_TEST_SQS_ENDPOINT"

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
  export ARCHIVIST_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:$RMQ_PORT/%2f
fi
log "RabbitMQ at ${ARCHIVIST_TEST_AMQP_URL%%//*}//…@${ARCHIVIST_TEST_AMQP_URL#*@}"

# ---------------------------------------------------------------- a browser
# The status page is tested in a real headless browser (bin/tests/e2e/status_page.rs): Debian's
# Chromium, installed when missing. Without it that test fails; it never skips.
if ! command -v chromium >/dev/null; then
  log "installing Chromium (apt)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
log "$(chromium --version 2>/dev/null | head -n 1)"

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
log "tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --all-features --no-fail-fast "$@"
  log "doc tests"
  cargo test --workspace --all-features --doc --quiet
else
  cargo test --workspace --all-features --no-fail-fast "$@"
fi
log "done"

