#!/usr/bin/env bash
# The media archive's benchmark (issue 47): the whole pipeline (`archivist run` and one
# `archivist research` process) over an archive of episodes served by a local HTTP server that
# supports Range, ETag and conditional requests and counts what it sends; a first pass
# (every episode against the first-pass clips), then one new clip across the archive. Twice,
# in the same run, on the same corpus:
#
#   - "prints": a print store and no media archive (issue 33's path: a conditional request
#     to the show for each episode, then Range reads of the candidates' seconds from it);
#   - "archive": the same with `--media-archive`: the first pass keeps each episode's copy;
#     the new clip reads the kept copies and the prints made from them, never the show.
#
# Reports, for each pass, the researcher's CPU seconds (user + system, every thread), the
# bytes and requests the show's server answered, and the new clip's answers against the
# corpus's truth; then the archive's new clip against the prints' (CPU and bytes, as ratios:
# absolute times drift on a shared machine).
#
#   scripts/bench-media-archive.sh [--corpus DIR] [--bin PATH]
#       (DIR: target/archive-corpus, made by scripts/make-archive-corpus.sh, e.g.
#        `--episodes 100 --minutes 5` for a quick one; PATH: target/release/archivist)
#
# Not run by CI.
set -euo pipefail
cd "$(dirname "$0")/.."

CORPUS=target/archive-corpus
BIN=${CARGO_TARGET_DIR:-target}/release/archivist
while [ $# -gt 0 ]; do
  case "$1" in
    --corpus) CORPUS=$2; shift ;;
    --bin) BIN=$2; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[ -x "$BIN" ] || { echo "no archivist binary at $BIN (cargo build --release, or --bin)" >&2; exit 2; }
[ -f "$CORPUS/truth.json" ] || { echo "no corpus in $CORPUS (scripts/make-archive-corpus.sh)" >&2; exit 2; }

exec python3 - "$CORPUS" "$BIN" <<'PY'
import email.utils, http.server, json, os, re, shutil, signal, subprocess, sys, tempfile
import threading, time

corpus, binary = sys.argv[1], os.path.abspath(sys.argv[2])
truth = json.load(open(f"{corpus}/truth.json"))
root = os.path.abspath(f"{corpus}/episodes")
episodes = truth["episodes"]
hours = sum(e["duration_s"] for e in episodes) / 3600
clips = [os.path.abspath(f"{corpus}/{c}") for c in truth["clips"]]
new = os.path.abspath(f"{corpus}/{truth['new']}")

counts = {"bytes": 0, "requests": 0, "ranged": 0, "full": 0, "not_modified": 0}
lock = threading.Lock()

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_GET(self):
        path = os.path.join(root, os.path.basename(self.path.split("?")[0]))
        if not os.path.isfile(path):
            self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers(); return
        st = os.stat(path)
        etag = f'"{st.st_size:x}-{st.st_mtime_ns:x}"'
        modified = email.utils.formatdate(st.st_mtime, usegmt=True)
        size = st.st_size
        with lock: counts["requests"] += 1
        if self.headers.get("If-None-Match") == etag:
            with lock: counts["not_modified"] += 1
            self.send_response(304); self.send_header("ETag", etag); self.end_headers(); return
        start, end = 0, size
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if_range = self.headers.get("If-Range")
        ranged = m is not None and (if_range is None or if_range in (etag, modified))
        if ranged:
            start = int(m.group(1)); end = min(size, int(m.group(2)) + 1) if m.group(2) else size
            if start >= size:
                self.send_response(416); self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0"); self.end_headers(); return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        else:
            self.send_response(200)
        self.send_header("Content-Type", "audio/mpeg" if path.endswith(".mp3") else "audio/mp4")
        self.send_header("Content-Length", str(end - start))
        self.send_header("ETag", etag); self.send_header("Last-Modified", modified)
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        sent = 0
        try:
            with open(path, "rb") as f:
                f.seek(start)
                while sent < end - start:
                    chunk = f.read(min(1 << 16, end - start - sent))
                    if not chunk: break
                    self.wfile.write(chunk); sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with lock:
                counts["bytes"] += sent
                counts["ranged" if ranged else "full"] += 1

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
base = f"http://127.0.0.1:{server.server_address[1]}/"
TICK = os.sysconf("SC_CLK_TCK")

def now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

def info(title, uri, media_type, aired=None):
    item = {"initial_date_curated": now(), "last_date_curated": now(), "curator_information": "bench",
            "title": title, "description": "", "media_uri": uri, "media_type": media_type, "priority": 0}
    if aired is not None:
        item["date_aired"] = aired
    return json.dumps(item)

def cpu_of(pid):
    # utime and stime of the process, every thread, in seconds.
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK

class Mode:
    def __init__(self, name, archive):
        self.name, self.work = name, tempfile.mkdtemp(prefix=f"media-archive-bench-{name}-")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("ARCHIVIST_")}
        self.env.update({"DATABASE_URL": f"sqlite://{self.work}/archivist.db", "NO_COLOR": "1",
                         "RUST_LOG": "warn", "XDG_CACHE_HOME": os.path.join(self.work, "cache"),
                         "ARCHIVIST_PRINT_STORE": os.path.join(self.work, "prints")})
        if archive:
            self.env["ARCHIVIST_MEDIA_ARCHIVE"] = os.path.join(self.work, "archive")
        self.run("migrate"); self.run("queues")
        self.procs = [self.spawn("run"),
                      self.spawn("research", "--concurrency", "2", "--allow-private-addresses")]
        self.researcher = self.procs[1]

    def run(self, *args, stdin=None):
        p = subprocess.run([binary, *args], input=stdin, capture_output=True, text=True,
                           env=self.env, cwd=self.work)
        if p.returncode != 0:
            sys.exit(f"archivist {' '.join(args)} failed ({p.returncode}):\n{p.stderr}")
        return p.stdout

    def spawn(self, *args):
        log = open(os.path.join(self.work, f"{args[0]}.log"), "w")
        return subprocess.Popen([binary, *args], env=self.env, cwd=self.work,
                                stdout=subprocess.DEVNULL, stderr=log)

    def wait_done(self, pairs):
        deadline = time.monotonic() + 3600
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    sys.exit(f"{self.name}: {p.args[1]} ended ({p.returncode}); see {self.work}")
            s = json.loads(self.run("status", "--json"))
            if s["research_pairs"] == pairs and s["researched_pairs"] + s["failed_pairs"] == pairs \
                    and s["active_leases"] == 0:
                return s
            time.sleep(0.5)
        sys.exit(f"{self.name}: not done within an hour")

    def research_pass(self, name, clip_paths, pairs):
        with lock: before = dict(counts)
        cpu0, t0 = cpu_of(self.researcher.pid), time.monotonic()
        self.run("send", "curated_clips", stdin="".join(
            info(os.path.basename(c), "file://" + c, "wav") + "\n" for c in clip_paths))
        status = self.wait_done(pairs)
        cpu, wall = cpu_of(self.researcher.pid) - cpu0, time.monotonic() - t0
        with lock: served = {k: counts[k] - before[k] for k in counts}
        return {"mode": self.name, "name": name, "cpu": cpu, "wall": wall, "served": served,
                "failed": status["failed_pairs"]}

    def stop(self):
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            p.wait(timeout=120)

def curate_episodes(mode):
    lines = []
    for n, e in enumerate(episodes):
        name = os.path.basename(e["file"])
        aired = f"2025-{1 + n // 28:02d}-{1 + n % 28:02d}T06:00:00Z"
        lines.append(info(f"Episode {n:03d}", base + name, name.rsplit(".", 1)[1], aired) + "\n")
    mode.run("send", "curated_episodes", stdin="".join(lines))

results, answers = [], {}
for name, archive in (("prints", False), ("archive", True)):
    mode = Mode(name, archive)
    try:
        curate_episodes(mode)
        results.append(mode.research_pass("first pass", clips, len(episodes) * len(clips)))
        results.append(mode.research_pass("new clip", [new], len(episodes) * (len(clips) + 1)))
        found = [json.loads(l) for l in mode.run("matches", "--format", "json", "--clip", os.path.basename(new)).splitlines()]
        answers[name] = {m["episode_title"]: sorted(m["clip_offsets_ns"]) for m in found}
        if archive:
            space = mode.run("archive", "space", "--json")
    finally:
        mode.stop()
    shutil.rmtree(mode.work, ignore_errors=True)

expected, right = 0, {k: 0 for k in answers}
for n, e in enumerate(episodes):
    want = [c["offset_s"] for c in e["clips"] if c["clip"] == truth["new"]]
    expected += len(want)
    for k, a in answers.items():
        got = a.get(f"Episode {n:03d}", [])
        right[k] += sum(1 for t in want if any(abs(o / 1e9 - t) < 0.01 for o in got))
same = sum(1 for t in set(answers["prints"]) | set(answers["archive"])
           if answers["prints"].get(t) == answers["archive"].get(t))

size = sum(os.path.getsize(os.path.join(root, os.path.basename(e["file"]))) for e in episodes)
print(f"archive: {len(episodes)} episodes, {hours:.1f} h, {size / 1e6:.0f} MB; {len(clips)} first-pass clips, then one new")
print(f"{'mode':<8} {'pass':<11} {'CPU s':>8} {'wall s':>8} {'bytes':>12} {'requests':>9} {'ranged':>7} {'304':>5} {'failed':>7}")
for r in results:
    s = r["served"]
    print(f"{r['mode']:<8} {r['name']:<11} {r['cpu']:>8.2f} {r['wall']:>8.2f} {s['bytes']:>12} {s['requests']:>9} "
          f"{s['ranged']:>7} {s['not_modified']:>5} {r['failed']:>7}")
print("(CPU: the researcher process's user + system time; bytes and requests: what the show's server answered)")
p_new, a_new = results[1], results[3]
p_first, a_first = results[0], results[2]
print(f"first pass, archive against prints: {a_first['cpu'] / p_first['cpu']:.2f}x the CPU, "
      f"{a_first['served']['bytes'] / max(1, p_first['served']['bytes']):.2f}x the bytes from the show")
print(f"new clip, archive against prints: {a_new['cpu'] / p_new['cpu']:.2f}x the CPU, "
      f"{a_new['served']['bytes']} bytes from the show (prints: {p_new['served']['bytes']})")
print(f"new clip per hour of audio (archive): {a_new['cpu'] / hours:.3f} CPU-s; at 4,000 hours "
      f"{a_new['cpu'] / hours * 4000 / 60:.1f} CPU-min")
print(f"new clip placements right: prints {right['prints']} of {expected}, archive {right['archive']} of {expected}; "
      f"the two modes' answers the same for {same} of {len(set(answers['prints']) | set(answers['archive']))} episodes")
print(f"the archive: {space.strip()}")
sys.exit(0 if a_new["served"]["bytes"] == 0 else 1)
PY
