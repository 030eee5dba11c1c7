#!/usr/bin/env bash
# Generates the reference analyser's evaluation corpus, deterministically, with Debian's
# espeak-ng, sox and ffmpeg (installed if missing), and writes its truth file (truth.json):
# where each clip was put, written by this generator; the analyser never writes it.
#
#   scripts/make-analysis-corpus.sh [--large] [OUT]     (OUT: target/analysis-corpus)
#
# Episodes of varied speech (several espeak-ng voices and speeds, music beds made with
# `sox synth`), clips of 2 to 30 s (spoken phrases, jingles, "voicemail" band-passed to
# 300-3400 Hz) inserted at known offsets: at 0 s, cut off by the end, twice in one episode,
# under talk-over, and absent; negatives (a clip's words spoken in another voice, the clip
# itself absent). Each episode is then rendered in every distortion class: lossless, MP3
# 64 kbit/s, AAC 96 kbit/s (M4A), Ogg Vorbis, pink noise at 20/10/5 dB SNR (then MP3 64k),
# a level change of -12 dB and dynamic compression (then MP3 64k), and clips played ±1%
# fast or slow (then MP3 64k). One episode looped to two hours, for memory and speed.
#
# The default corpus (3 episodes of 10-20 min, 50 clips, 33 episode files) builds in a few
# minutes on two cores; --large makes 6 episodes of 10-60 min.
set -euo pipefail
cd "$(dirname "$0")/.."

SIZE=small
OUT=target/analysis-corpus
for a in "$@"; do
  case "$a" in
    --large) SIZE=large ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) OUT=$a ;;
  esac
done

need=()
for tool in espeak-ng sox ffmpeg; do command -v "$tool" >/dev/null || need+=("$tool"); done
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing ${need[*]} (apt)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq espeak-ng sox ffmpeg >/dev/null
fi

mkdir -p "$OUT"
exec python3 - "$OUT" "$SIZE" <<'PY'
import json, os, random, subprocess, sys, wave

out, size = sys.argv[1], sys.argv[2]
RATE = 22050
rng = random.Random(2026)
os.makedirs(f"{out}/clips", exist_ok=True)
os.makedirs(f"{out}/episodes", exist_ok=True)
work = f"{out}/work"
os.makedirs(work, exist_ok=True)

def run(*args):
    subprocess.run(args, check=True, stdin=subprocess.DEVNULL)

def ffmpeg(src, dst, *args):
    run("ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-i", src, *args, dst)

def frames(path):
    with wave.open(path) as w:
        return w.getnframes()

def read(path):
    with wave.open(path) as w:
        assert w.getframerate() == RATE and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        return w.readframes(w.getnframes())

def write(path, data):
    with wave.open(path, "wb") as w:
        w.setnchannels(1); w.setsampwidth(2); w.setframerate(RATE); w.writeframes(data)

def sox(*args):
    # -R: repeatable (seeded noise and dither): the same corpus on every run.
    run("sox", "-R", "-V1", *args)

def norm(src, dst, extra=()):
    sox(src, "-r", str(RATE), "-c", "1", "-b", "16", dst, *extra)

def rms(path):
    r = subprocess.run(["sox", path, "-n", "stat"], capture_output=True, text=True, check=True)
    for line in r.stderr.splitlines():
        if line.startswith("RMS     amplitude"):
            return float(line.split()[-1])
    raise RuntimeError(path)

WORDS = """time year people way day man thing woman life child world school state family student
group country problem hand part place case week company system program question work government
number night point home water room mother area money story fact month lot right study book eye
job word business issue side kind head house service friend father power hour game line end member
law car city community name president team minute idea kid body information back parent face others
level office door health person art war history party result change morning reason research girl
guy moment air teacher force education foot boy age policy music market sense nation plan college
interest death experience effect class control care field development role effort rate heart drug
show leader light voice wife police mind price report decision son view relationship town road arm
difference value building action model season society tax director position player record paper
space ground form event official matter center couple site project activity star table need court
oil situation cost industry figure street image phone data picture practice piece land product
doctor wall patient worker news test movie north love support technology step baby computer type
attention film tree source organization hair window evidence population truth song""".split()
VERBS = "said made went took came saw knew got gave found thought told became left felt brought began kept held wrote stood heard".split()
# Voices: distinct espeak-ng languages/accents at distinct pitches ("+f3"-style variants are
# silently ignored when espeak-ng-data has no variants, so pitch is set with -p instead).
VOICES = [("en-us", 50), ("en-gb", 40), ("en-gb-scotland", 45), ("en-us", 78), ("en-gb-x-rp", 70),
          ("en-029", 32), ("en-gb-x-gbclan", 58), ("en-gb-x-gbcwmd", 64)]

def sentence():
    n = rng.randint(6, 14)
    w = [rng.choice(WORDS) for _ in range(n)]
    w.insert(rng.randint(1, n - 1), rng.choice(VERBS))
    return "the " + " ".join(w) + "."

def speak(text, voice, speed, dst):
    tmp = dst + ".raw.wav"
    name, pitch = voice
    run("espeak-ng", "-v", name, "-p", str(pitch), "-s", str(speed), "-w", tmp, text)
    norm(tmp, dst, ("gain", "-n", "-3"))
    os.remove(tmp)

# ------------------------------------------------------------------ clips
clips = []
def add_clip(kind, dst, text=None, voice=None):
    clips.append({"file": f"clips/{os.path.basename(dst)}", "kind": kind,
                  "duration_s": frames(dst) / RATE, "text": text, "voice": voice})

durations = [2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30]
for i in range(30):
    d = durations[i % len(durations)]
    voice = VOICES[i % len(VOICES)]
    text = " ".join(sentence() for _ in range(max(1, d // 3 + 1)))
    raw = f"{work}/phrase{i}.wav"
    speak(text, voice, 165, raw)
    dst = f"{out}/clips/phrase{i:02}.wav"
    sox(raw, dst, "trim", "0", str(min(d, frames(raw) / RATE)))
    add_clip("phrase", dst, text, voice)
for i in range(10):
    # Each jingle its own instrument, tuning and tempo: two different jingles never share
    # sample-identical notes (two recordings of different tunes do not).
    notes = []
    d = [2, 3, 4, 5, 6, 8][i % 6]
    timbre = ["pluck", "square", "sawtooth", "triangle", "sine"][i % 5]
    tune = 220 * 2 ** (rng.uniform(-3, 3) / 12)
    beat = rng.uniform(0.15, 0.3)
    t = 0.0
    k = 0
    while t < d:
        step = beat * rng.choice([1, 1, 2, 1.5])
        f = tune * 2 ** (rng.choice([0, 2, 4, 7, 9, 12, 14, 16]) / 12)
        n = f"{work}/j{i}_{k}.wav"
        sox("-n", "-r", str(RATE), "-c", "1", "-b", "16", n, "synth", f"{step:.3f}", timbre, f"{f:.2f}",
            "synth", f"{step:.3f}", "sine", "mix", f"{f * 2:.2f}", "fade", "0", f"{step:.3f}", f"{step * 0.6:.3f}", "gain", "-9")
        notes.append(n); t += step; k += 1
    dst = f"{out}/clips/jingle{i:02}.wav"
    sox(*notes, dst, "trim", "0", str(d), "gain", "-n", "-3")
    add_clip("jingle", dst)
for i in range(10):
    d = [3, 5, 8, 10, 15][i % 5]
    voice = VOICES[(i + 3) % len(VOICES)]
    text = " ".join(sentence() for _ in range(d // 3 + 1))
    raw = f"{work}/vm{i}.wav"
    speak(text, voice, 175, raw)
    dst = f"{out}/clips/voicemail{i:02}.wav"
    # The telephone band, a little compression, as a phone line gives it.
    sox(raw, dst, "trim", "0", str(min(d, frames(raw) / RATE)), "sinc", "300-3400",
        "compand", "0.02,0.2", "-60,-60,-30,-15,0,-6", "0", "-90", "gain", "-n", "-3")
    add_clip("voicemail", dst, text, voice)

# ------------------------------------------------------------------ episodes
bases = [10, 15, 20] if size == "small" else [10, 20, 30, 40, 50, 60]

def speech_piece(seconds, idx, tag, voice=None):
    """Turns of several voices, about `seconds` long."""
    data = b""
    k = 0
    while len(data) < seconds * RATE * 2:
        v = voice or rng.choice(VOICES)
        text = " ".join(sentence() for _ in range(rng.randint(2, 5)))
        p = f"{work}/{tag}_{idx}_{k}.wav"
        speak(text, v, rng.randint(140, 190), p)
        data += read(p) + b"\0\0" * int(RATE * rng.uniform(0.2, 0.6))
        os.remove(p)
        k += 1
    return data

def bed(seconds, dst):
    """A music bed: sustained chords from `sox synth`, four seconds each."""
    parts = []
    for k in range(int(seconds // 4) + 1):
        root = 110 * 2 ** (rng.randrange(12) / 12)
        p = f"{work}/bedpart{k}.wav"
        sox("-n", "-r", str(RATE), "-c", "1", "-b", "16", p, "synth", "4", "sine", f"{root:.2f}",
            "synth", "4", "sine", "mix", f"{root * 1.26:.2f}", "synth", "4", "sine", "mix", f"{root * 1.5:.2f}",
            "fade", "0.5", "4", "0.5", "gain", "-12")
        parts.append(p)
    sox(*parts, dst, "trim", "0", f"{seconds}")
    for p in parts: os.remove(p)

truth = {"rate": RATE, "clips": clips, "episodes": []}
phrase_ids = [i for i, c in enumerate(clips) if c["kind"] == "phrase"]
other_ids = [i for i, c in enumerate(clips) if c["kind"] != "phrase"]
for b, minutes in enumerate(bases):
    # Which clips go where (the same plan for the normal and the ±1% speed builds).
    chosen = rng.sample(phrase_ids, 8) + rng.sample(other_ids, 5)
    negatives = [i for i in rng.sample(phrase_ids, 4) if i not in chosen][:2]
    plan = [("at_start", chosen[0]), ("twice", chosen[1]), ("talk_over", chosen[2]),
            ("talk_over", chosen[3])] + [("plain", c) for c in chosen[4:-1]] + [("end_cutoff", chosen[-1])]
    order = plan[1:-1]
    rng.shuffle(order)
    twice = next(p for p in order if p[0] == "twice")
    order.insert(rng.randrange(len(order)), ("twice", twice[1]))
    gap = minutes * 60 / (len(order) + len(negatives) + 1)
    gaps = [speech_piece(gap * rng.uniform(0.6, 1.3), b * 100 + k, f"ep{b}") for k in range(len(order) + len(negatives) + 1)]
    neg_audio = []
    for n in negatives:
        c = clips[n]
        # Another accent at another pitch: the same words, not the same audio.
        other = next(v for v in VOICES[::-1] if v[0] != c["voice"][0] and abs(v[1] - c["voice"][1]) >= 10)
        p = f"{work}/neg{b}_{n}.wav"
        speak(c["text"], other, 165, p)
        neg_audio.append((n, read(p)[: int(c["duration_s"] * RATE) * 2]))
    slots = ["clip"] * len(order) + ["neg"] * len(negatives)
    rng.shuffle(slots)
    for variant, speeds in (("", None), ("speed", (0.99, 1.01))):
        data = b""
        items = []
        def put(kind, cid, audio):
            global data
            items.append({"clip": clips[cid]["file"], "kind": kind, "offset_s": len(data) / 2 / RATE,
                          "speed": speed})
            data += audio
        seq = list(order)
        negs = list(neg_audio)
        for k, slot in enumerate([("clip", plan[0])] + [(s, None) for s in slots] + [("end", plan[-1])]):
            kind, cid = (slot[1] if slot[1] else (None, None))
            speed = 1.0
            if slot[0] == "clip" and slot[1] is None:
                kind, cid = seq.pop(0)
            if slot[0] in ("clip", "end"):
                src = f"{out}/{clips[cid]['file']}"
                if speeds:
                    speed = speeds[(k + b) % 2]
                    p = f"{work}/sp{b}_{k}.wav"
                    sox(src, p, "speed", str(speed), "rate", "-v", str(RATE))
                    src = p
                audio = read(src)
                if kind == "end_cutoff":
                    audio = audio[: len(audio) // 2 // 2 * 2]
                if kind == "talk_over":
                    # The host talks over the clip: mixed at equal level.
                    under = f"{work}/under{b}_{k}.wav"
                    write(under, speech_piece(len(audio) / 2 / RATE, k, f"to{b}")[: len(audio)])
                    cw, mixed = f"{work}/cw{b}_{k}.wav", f"{work}/mix{b}_{k}.wav"
                    write(cw, audio)
                    sox("-m", cw, under, mixed)
                    audio = read(mixed)[: len(audio)]
                put(kind, cid, audio)
            else:
                n, audio = negs.pop(0)
                items.append({"clip": clips[n]["file"], "kind": "negative_same_words", "offset_s": None, "speed": 1.0})
                data += audio
            if slot[0] != "end":
                data += gaps[k]
        base = f"{work}/base{b}{variant}.wav"
        write(base, data)
        if b != 1:
            bedf = f"{work}/bed{b}.wav"
            if not os.path.exists(bedf):
                bed(len(data) / 2 / RATE + 1, bedf)
            mixed = f"{work}/bedmix{b}{variant}.wav"
            sox("-m", "-v", "1", base, "-v", "0.5", bedf, mixed, "trim", "0", str(len(data) / 2 / RATE))
            base = mixed
        duration = frames(base) / RATE
        present = {}
        for it in items:
            if it["offset_s"] is not None:
                present.setdefault(it["clip"], []).append(round(it["offset_s"], 9))
        negs_files = [it["clip"] for it in items if it["kind"] == "negative_same_words"]
        def emit(cls, ext, *args, src=None):
            name = f"episodes/ep{b}-{cls}.{ext}"
            ffmpeg(src or base, f"{out}/{name}", "-ar", "44100", *args)
            truth["episodes"].append({"file": name, "class": cls, "base": b, "duration_s": duration,
                                      "present": present, "items": items, "negatives": negs_files})
            print(f"  {name}", file=sys.stderr)
        mp3 = ("-c:a", "libmp3lame", "-b:a", "64k")
        if variant == "speed":
            emit("speed1pct_mp3_64k", "mp3", *mp3)
            continue
        emit("lossless", "flac", "-c:a", "flac")
        emit("mp3_64k", "mp3", *mp3)
        emit("aac_96k", "m4a", "-c:a", "aac", "-b:a", "96k")
        emit("ogg_q2", "ogg", "-c:a", "libvorbis", "-q:a", "2")
        speech_rms = rms(base)
        noise = f"{work}/noise{b}.wav"
        sox("-n", "-r", str(RATE), "-c", "1", "-b", "16", noise, "synth", str(duration), "pinknoise", "gain", "-n", "-10")
        noise_rms = rms(noise)
        for snr in (20, 10, 5):
            g = speech_rms / noise_rms * 10 ** (-snr / 20)
            noisy = f"{work}/noisy{b}_{snr}.wav"
            sox("-m", "-v", "1", base, "-v", f"{g:.6f}", noise, noisy, "gain", "-n", "-1")
            emit(f"noise{snr}db_mp3_64k", "mp3", *mp3, src=noisy)
        quiet = f"{work}/quiet{b}.wav"
        sox(base, quiet, "gain", "-12")
        emit("level-12db_mp3_64k", "mp3", *mp3, src=quiet)
        comp = f"{work}/comp{b}.wav"
        sox(base, comp, "compand", "0.3,1", "6:-70,-60,-20", "-5", "-90", "0.2", "gain", "-n", "-1")
        emit("compressed_mp3_64k", "mp3", *mp3, src=comp)

# Two hours: the last episode's MP3 looped (memory and speed only; no truth).
last = f"{out}/episodes/ep{len(bases) - 1}-mp3_64k.mp3"
run("ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-stream_loop", "-1", "-i", last,
    "-t", "7200", "-c", "copy", f"{out}/long-2h.mp3")
truth["long"] = "long-2h.mp3"
with open(f"{out}/truth.json", "w") as f:
    json.dump(truth, f, indent=1)
subprocess.run(["rm", "-rf", work], check=True)
print(f"corpus in {out}: {len(clips)} clips, {len(truth['episodes'])} episode files", file=sys.stderr)
PY
