#!/usr/bin/env bash
# The archive-scale benchmark of episode prints (issue 33): an archive served over HTTP by
# a local server that supports Range, ETag and conditional requests and counts what it
# sends; the first pass (every episode against the first-pass clips, printing into a
# directory print store), then one new clip across the archive twice: from the prints and
# without them. Every episode of the new clip's passes is analysed by a process of its own
# (`archivist analyse URL CLIP --print-store DIR`, the researcher's code path: conditional
# request, print store, Range reads), so each starts with an empty media cache and none is
# the process that printed. Reports CPU seconds (the children's user + system time), wall
# time, seconds of audio decoded, bytes and requests served, for each pass, and compares
# the new clip's answers pair by pair (same occurrences, offsets within 1 ms, scores within
# 0.01) and against the corpus's truth.
#
#   scripts/bench-archive.sh [--corpus DIR] [--bin PATH] [--store DIR]
#       (DIR: target/archive-corpus, made by scripts/make-archive-corpus.sh;
#        PATH: target/release/archivist)
#
# Each process also says what its episode cost it (`episode_cpu_ms` in its debug log: the
# process's CPU, every thread, for fetching and analysing the episode, its clips fetched
# and fingerprinted before): the per-item figures are their sums, as a researcher that
# answers many work items pays its own start (runtime, clients, the clip's fingerprint)
# once, not per item. A binary that does not say it: the same command on a one-second
# episode is measured instead and taken off each process (noisier). Not run by CI.
set -euo pipefail
cd "$(dirname "$0")/.."

CORPUS=target/archive-corpus
BIN=${CARGO_TARGET_DIR:-target}/release/archivist
STORE=
while [ $# -gt 0 ]; do
  case "$1" in
    --corpus) CORPUS=$2; shift ;;
    --bin) BIN=$2; shift ;;
    --store) STORE=$2; shift ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[ -x "$BIN" ] || { echo "no archivist binary at $BIN (cargo build --release, or --bin)" >&2; exit 2; }
[ -f "$CORPUS/truth.json" ] || { echo "no corpus in $CORPUS (scripts/make-archive-corpus.sh)" >&2; exit 2; }

exec python3 - "$CORPUS" "$BIN" "$STORE" <<'PY'
import email.utils, http.server, json, os, re, resource, shutil, subprocess, sys, tempfile
import threading, time, wave

corpus, binary, store = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3]
truth = json.load(open(f"{corpus}/truth.json"))
root = os.path.abspath(f"{corpus}/episodes")

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
        ranged = m is not None and (if_range is None or if_range == etag)
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
        finally:
            with lock:
                counts["bytes"] += sent
                counts["ranged" if ranged else "full"] += 1

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
base = f"http://127.0.0.1:{server.server_address[1]}/"

work = tempfile.mkdtemp(prefix="archive-bench-")
store = store or os.path.join(work, "prints")
clips = [os.path.abspath(f"{corpus}/{c}") for c in truth["clips"]]
new = os.path.abspath(f"{corpus}/{truth['new']}")
episodes = truth["episodes"]
hours = sum(e["duration_s"] for e in episodes) / 3600

def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime

def analyse(episode_url, clip_paths, prints):
    args = [binary, "analyse", episode_url, *clip_paths, "--json", "--allow-private-addresses"]
    if prints:
        args += ["--print-store", store]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARCHIVIST_")}
    env.update({"RUST_LOG": "info,analysis=debug,archivist::commands::analyse=debug", "NO_COLOR": "1",
                "XDG_CACHE_HOME": os.path.join(work, "cache")})
    p = subprocess.run(args, capture_output=True, text=True, env=env, cwd=work)
    if p.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({p.returncode}):\n{p.stderr}")
    return [json.loads(l) for l in p.stdout.splitlines()], p.stderr

def run_pass(name, clip_paths, prints):
    with lock: before = dict(counts)
    cpu0, t0 = child_cpu(), time.monotonic()
    answers, decoded, from_print, items = [], 0.0, 0, 0.0
    for e in episodes:
        lines, log = analyse(base + os.path.basename(e["file"]), clip_paths, prints)
        answers.append(lines)
        c = re.search(r"episode_cpu_ms=([0-9.]+)", log)
        # Not said (an older binary): not known (nan), the one-second episode's cost used.
        items += float(c.group(1)) / 1000 if c else float("nan")
        m = re.search(r"candidates from the print.*?decoded_ms=(\d+)", log)
        if "answered from the episode's print" in log:
            from_print += 1
            # An analyser that does not log what it decoded: not known (nan).
            decoded += int(m.group(1)) / 1000 if m else float("nan")
        else:
            decoded += lines[0]["episode_duration_ns"] / 1e9
    cpu, wall = child_cpu() - cpu0, time.monotonic() - t0
    with lock: served = {k: counts[k] - before[k] for k in counts}
    return {"name": name, "cpu": cpu, "wall": wall, "decoded": decoded, "from_print": from_print,
            "served": served, "answers": answers, "items": items}

# A process's own cost: the same command on a one-second episode.
tiny = os.path.join(work, "tiny.wav")
with wave.open(tiny, "wb") as w:
    w.setnchannels(1); w.setsampwidth(2); w.setframerate(22050)
    w.writeframes(bytes((i * 7919) % 251 for i in range(44100)))
cpu0 = child_cpu()
for _ in range(5):
    analyse(tiny, [new], False)
overhead = (child_cpu() - cpu0) / 5

first = run_pass("first pass, printing", clips, True)
with_prints = run_pass("new clip from prints", [new], True)
without = run_pass("new clip without prints", [new], False)

def offsets(lines):
    return [(m_off, m["score"]) for m_off, m in zip(lines[0]["clip_offsets_ns"], lines[0]["matches"])]

same, differ, found, expected, right = 0, [], 0, 0, 0
for e, a, b in zip(episodes, with_prints["answers"], without["answers"]):
    x, y = offsets(a), offsets(b)
    ok = len(x) == len(y) and all(abs(p[0] - q[0]) <= 1_000_000 and abs(p[1] - q[1]) <= 0.01 for p, q in zip(x, y))
    same += ok
    if not ok: differ.append((e["file"], x, y))
    want = [c["offset_s"] for c in e["clips"] if c["clip"] == truth["new"]]
    expected += len(want); found += len(y)
    right += sum(1 for t in want if any(abs(o / 1e9 - t) < 0.01 for o, _ in y))

n = len(episodes)
print(f"archive: {n} episodes, {hours:.1f} h ({sum(1 for e in episodes if e['file'].endswith('.mp3'))} MP3 128k, "
      f"{sum(1 for e in episodes if e['file'].endswith('.m4a'))} M4A 128k), "
      f"{sum(os.path.getsize(os.path.join(root, os.path.basename(e['file']))) for e in episodes) / 1e6:.0f} MB; "
      f"{len(clips)} first-pass clips")
print(f"a process's own cost on a one-second episode, one clip: {overhead:.3f} s CPU")
print(f"{'pass':<26} {'CPU s':>8} {'items s':>8} {'wall s':>8} {'audio s':>9} {'bytes':>12} {'requests':>9} {'ranged':>7} {'304':>5} {'printed':>8}")
for p in (first, with_prints, without):
    s = p["served"]
    print(f"{p['name']:<26} {p['cpu']:>8.2f} {p['items']:>8.2f} {p['wall']:>8.2f} {p['decoded']:>9.1f} {s['bytes']:>12} "
          f"{s['requests']:>9} {s['ranged']:>7} {s['not_modified']:>5} {p['from_print']:>8}")
print("(CPU: the processes' user + system time; items: what each process said its episode cost it, "
      "its own start not counted)")
def net_of(p):
    # The items' CPU as each process said it; else the processes' less the one-second episode's.
    return p["items"] if p["items"] == p["items"] else max(p["cpu"] - n * overhead, 1e-9)
net, net_full = net_of(with_prints), net_of(without)
print(f"own cost a process (CPU less items): from prints {(with_prints['cpu'] - with_prints['items']) / n:.3f} s, "
      f"without {(without['cpu'] - without['items']) / n:.3f} s")
print(f"new clip, prints against none: {without['cpu'] / with_prints['cpu']:.1f}x less CPU "
      f"({net_full / net:.1f}x without each process's own cost), "
      f"{without['served']['bytes'] / max(1, with_prints['served']['bytes']):.0f}x fewer bytes, "
      f"{without['decoded'] / max(1e-9, with_prints['decoded']):.0f}x less audio decoded")
print(f"per hour of audio from prints: {net / hours:.4f} s CPU (without each process's own cost), "
      f"{with_prints['served']['bytes'] / hours / 1e3:.0f} KB; at 4,000 one-hour episodes: "
      f"{net / hours * 4000 / 60:.1f} CPU-min, {with_prints['served']['bytes'] / hours * 4000 / 1e9:.2f} GB")
print(f"answers pair by pair: {same} of {n} the same; new clip found {found} times, "
      f"{right} of {expected} placements right")
for d in differ:
    print("DIFFERENT:", d)
shutil.rmtree(work, ignore_errors=True)
sys.exit(1 if differ else 0)
PY
