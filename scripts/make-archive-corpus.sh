#!/usr/bin/env bash
# Generates an archive for the episode-print benchmark (scripts/bench-archive.sh):
# many long episodes, as a show's back catalogue is, deterministically, with Debian's
# espeak-ng, sox and ffmpeg (installed if missing), and its truth file (truth.json).
#
#   scripts/make-archive-corpus.sh [--episodes N] [--minutes M] [OUT]
#       (defaults: 100 episodes of 30 minutes, 50 hours; OUT: target/archive-corpus)
#
# Episodes are turns of eight espeak-ng voices (a pool of utterances rendered once, drawn
# at random with pauses between them) over a quiet chord bed, 44.1 kHz mono, alternately MP3
# 128 kbit/s and AAC/M4A 128 kbit/s (a show's usual bitrate: ~58 MB an hour). Eight
# first-pass clips (spoken phrases in voices of their own, and sox jingles) are put into
# most episodes at known offsets, and the *new* clip (clips/new.wav, a phrase in another
# voice) into every tenth episode. The corpus is cached: an episode already made is kept
# (delete OUT to start over); making 50 hours takes about an hour of one core, mostly the
# encoders. Not made or run by CI.
set -euo pipefail
cd "$(dirname "$0")/.."

EPISODES=100
MINUTES=30
OUT=target/archive-corpus
while [ $# -gt 0 ]; do
  case "$1" in
    --episodes) EPISODES=$2; shift ;;
    --minutes) MINUTES=$2; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) OUT=$1 ;;
  esac
  shift
done

need=()
for tool in espeak-ng sox ffmpeg; do command -v "$tool" >/dev/null || need+=("$tool"); done
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing ${need[*]} (apt)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends espeak-ng sox ffmpeg >/dev/null
fi

mkdir -p "$OUT"
exec python3 - "$OUT" "$EPISODES" "$MINUTES" <<'PY'
import json, os, random, subprocess, sys, wave

out, episodes, minutes = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
RATE = 22050
rng = random.Random(33)
for d in ("clips", "episodes", "work"):
    os.makedirs(f"{out}/{d}", exist_ok=True)
work = f"{out}/work"

def run(*args):
    subprocess.run(args, check=True, stdin=subprocess.DEVNULL)

def sox(*args):
    run("sox", "-R", "-V1", *args)

def read(path):
    with wave.open(path) as w:
        assert w.getframerate() == RATE and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        return w.readframes(w.getnframes())

def write(path, data):
    with wave.open(path, "wb") as w:
        w.setnchannels(1); w.setsampwidth(2); w.setframerate(RATE); w.writeframes(data)

WORDS = """time year people way day man thing woman life child world school state family student
group country problem hand part place case week company system program question work government
number night point home water room mother area money story fact month lot right study book eye
job word business issue side kind head house service friend father power hour game line end member
law car city community name president team minute idea kid body information back parent face others
level office door health person art war history party result change morning reason research girl
guy moment air teacher force education foot boy age policy music market sense nation plan college
interest death experience effect class control care field development role effort rate heart drug""".split()
VOICES = [("en-us", 50), ("en-gb", 40), ("en-gb-scotland", 45), ("en-us", 78), ("en-gb-x-rp", 70),
          ("en-029", 32), ("en-gb-x-gbclan", 58), ("en-gb-x-gbcwmd", 64)]

def sentence(r):
    return "the " + " ".join(r.choice(WORDS) for _ in range(r.randint(6, 14))) + "."

def speak(text, voice, speed, dst, seconds=None):
    tmp = dst + ".raw.wav"
    name, pitch = voice
    run("espeak-ng", "-v", name, "-p", str(pitch), "-s", str(speed), "-w", tmp, text)
    extra = ("trim", "0", str(seconds)) if seconds else ()
    sox(tmp, "-r", str(RATE), "-c", "1", "-b", "16", dst, *extra, "gain", "-n", "-3")
    os.remove(tmp)

# ------------------------------------------------------------------ clips (made once)
clips = []
for i in range(8):
    dst = f"{out}/clips/clip{i}.wav"
    if i % 4 == 3:
        if not os.path.exists(dst):
            notes, t, k = [], 0.0, 0
            tune = 220 * 2 ** (rng.uniform(-3, 3) / 12)
            while t < 4:
                step = rng.choice([0.2, 0.25, 0.4])
                f = tune * 2 ** (rng.choice([0, 4, 7, 12]) / 12)
                n = f"{work}/j{i}_{k}.wav"
                sox("-n", "-r", str(RATE), "-c", "1", "-b", "16", n, "synth", f"{step}", "square",
                    f"{f:.2f}", "fade", "0", f"{step}", f"{step * 0.6:.3f}", "gain", "-9")
                notes.append(n); t += step; k += 1
            sox(*notes, dst, "trim", "0", "4", "gain", "-n", "-3")
            for n in notes: os.remove(n)
    else:
        r = random.Random(100 + i)
        text = " ".join(sentence(r) for _ in range(3))
        if not os.path.exists(dst):
            speak(text, (VOICES[i % 8][0], 20 + 9 * i), 160, dst, seconds=5 + i)
    clips.append(f"clips/clip{i}.wav")
new = f"{out}/clips/new.wav"
if not os.path.exists(new):
    r = random.Random(999)
    speak(" ".join(sentence(r) for _ in range(2)), ("en-gb", 88), 170, new, seconds=5)

# ------------------------------------------------------------------ the pool (made once)
pool = []
for k in range(48):
    p = f"{work}/pool{k}.wav"
    r = random.Random(1000 + k)
    if not os.path.exists(p):
        speak(" ".join(sentence(r) for _ in range(r.randint(2, 5))), VOICES[k % 8], r.randint(140, 190), p)
    pool.append(read(p))
bed_path = f"{work}/bed.wav"
if not os.path.exists(bed_path):
    parts = []
    for k in range(30):
        root = 110 * 2 ** (rng.randrange(12) / 12)
        p = f"{work}/bed{k}.wav"
        sox("-n", "-r", str(RATE), "-c", "1", "-b", "16", p, "synth", "4", "sine", f"{root:.2f}",
            "synth", "4", "sine", "mix", f"{root * 1.26:.2f}", "synth", "4", "sine", "mix",
            f"{root * 1.5:.2f}", "fade", "0.5", "4", "0.5", "gain", "-24")
        parts.append(p)
    sox(*parts, bed_path)
    for p in parts: os.remove(p)
bed = read(bed_path)

# ------------------------------------------------------------------ episodes
clip_data = [read(f"{out}/{c}") for c in clips] + [read(new)]
truth = {"rate": RATE, "clips": clips, "new": "clips/new.wav", "episodes": []}
for e in range(episodes):
    r = random.Random(5000 + e)
    ext = "mp3" if e % 2 == 0 else "m4a"
    name = f"episodes/ep{e:03}.{ext}"
    length = int(minutes * 60 * RATE) * 2
    # Where clips go: one to three first-pass clips, and the new clip in every tenth.
    placed = []
    for c in r.sample(range(len(clips)), r.randint(1, 3)):
        placed.append(c)
    if e % 10 == 3:
        placed.append(len(clips))
    slots = sorted(r.sample(range(1, max(2, int(minutes * 60 / 40))), len(placed)))
    inserts = [(s * 40 * RATE * 2, c) for s, c in zip(slots, placed)]
    truth["episodes"].append({
        "file": name, "duration_s": minutes * 60,
        "clips": [{"clip": (clips + ["clips/new.wav"])[c], "offset_s": o / 2 / RATE} for o, c in inserts],
    })
    if os.path.exists(f"{out}/{name}"):
        continue
    speech = bytearray()
    while len(speech) < length:
        speech += pool[r.randrange(len(pool))] + b"\0\0" * int(RATE * r.uniform(0.2, 0.8))
    speech = speech[:length]
    for o, c in inserts:
        d = clip_data[c]
        speech[o:o + len(d)] = d
        speech = speech[:length]
    sp = f"{work}/speech.wav"; bd = f"{work}/bedlong.wav"; mixed = f"{work}/mixed.wav"
    write(sp, bytes(speech))
    reps = length // len(bed) + 1
    start = r.randrange(len(bed) // 2) * 2
    write(bd, (bed * (reps + 1))[start:start + length])
    sox("-m", sp, bd, mixed)
    codec = ["-c:a", "libmp3lame", "-b:a", "128k"] if ext == "mp3" else ["-c:a", "aac", "-b:a", "128k"]
    tmp = f"{out}/{name}.part.{ext}"
    run("ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-i", mixed, "-ar", "44100",
        *codec, tmp)
    os.replace(tmp, f"{out}/{name}")
    print(f"{name}", file=sys.stderr)
json.dump(truth, open(f"{out}/truth.json", "w"), indent=1)
print(f"{episodes} episodes of {minutes} min in {out}", file=sys.stderr)
PY
