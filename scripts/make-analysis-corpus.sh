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
for tool in espeak-ng sox ffmpeg timidity; do command -v "$tool" >/dev/null || need+=("$tool"); done
[ -f /usr/share/sounds/freedesktop/stereo/bell.oga ] || need+=(sound-theme-freedesktop)
[ -f /etc/timidity/freepats.cfg ] || need+=(freepats)
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing ${need[*]} (apt)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends espeak-ng sox ffmpeg timidity freepats sound-theme-freedesktop >/dev/null
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
        # `sox -R` seeds its generator the same way on every run, so noise synthesised from the
        # start would repeat the sfx clips' own noise (sfx_whoosh, sfx_riser) sample for sample:
        # a false "match" made by the generator. The noise classes take the generator's output
        # from a later point instead (a different stretch per episode), never the clips' first
        # seconds.
        skip = 60 + 17 * b
        sox("-n", "-r", str(RATE), "-c", "1", "-b", "16", noise, "synth", str(duration + skip), "pinknoise",
            "trim", str(skip), "gain", "-n", "-10")
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

# ------------------------------------------------------------------ clips under speech and music
# Short clips (1-8 s) placed under a voice or a music bed at a set clip-to-background ratio
# (the clip's RMS against the background's RMS over the clip's span): tonal jingles and
# stings (MIDI rendered by timidity with the freepats samples), sound effects (`sox synth`
# and the recorded ones of sound-theme-freedesktop), voice tags (espeak-ng, and the recorded
# voice of sound-theme-freedesktop's channel names). Backgrounds: espeak-ng speech of several
# voices, and a music bed (chords, bass, piano, drums) rendered from MIDI. Near misses in the
# same backgrounds: a jingle or sting transposed, a voice tag's words in another voice (the
# clip itself absent from that episode).
import array, math, struct
orng = random.Random(3232)
SOUNDS = "/usr/share/sounds/freedesktop/stereo"
PATCHES = "/etc/timidity/freepats.cfg"

def vlq(n):
    b = [n & 0x7F]
    n >>= 7
    while n:
        b.append(0x80 | (n & 0x7F)); n >>= 7
    return bytes(reversed(b))

def midi(path, notes, programs, tempo_us=500000):
    """notes: (start_s, dur_s, channel, pitch, velocity); at 120 bpm and 480 ticks a beat."""
    tick = lambda s: int(round(s * 960))
    ev = [(0, 0, bytes([0xC0 | ch, prog])) for ch, prog in programs.items()]
    for s, d, ch, p, v in notes:
        ev.append((tick(s), 2, bytes([0x90 | ch, p, v])))
        ev.append((tick(s + d), 1, bytes([0x80 | ch, p, 0])))
    ev.sort(key=lambda e: (e[0], e[1], e[2]))
    data = b"\x00\xff\x51\x03" + tempo_us.to_bytes(3, "big")
    last = 0
    for t, _, e in ev:
        data += vlq(t - last) + e; last = t
    data += vlq(0) + b"\xff\x2f\x00"
    with open(path, "wb") as f:
        f.write(b"MThd" + struct.pack(">IHHH", 6, 0, 1, 480) + b"MTrk" + struct.pack(">I", len(data)) + data)

def render_midi(notes, programs, dst, seconds):
    mid = f"{work}/{os.path.basename(dst)}.mid"
    raw = f"{work}/{os.path.basename(dst)}.raw.wav"
    midi(mid, notes, programs)
    subprocess.run(["timidity", "-c", PATCHES, "-Ow", "-s", str(RATE), "--output-mono", "-o", raw, mid],
                   check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sox(raw, dst, "trim", "0", f"{seconds}", "gain", "-n", "-3")
    os.remove(mid); os.remove(raw)

def samples(path):
    return array.array("h", read(path))

def rms_of(a, lo=0, hi=None):
    hi = len(a) if hi is None else hi
    n = max(1, hi - lo)
    return math.sqrt(sum(x * x for x in a[lo:hi]) / n) / 32768

SCALE = [0, 2, 4, 7, 9, 12, 14, 16, 19]
INSTRUMENTS = [0, 9, 13, 24, 56, 73, 27, 46, 114, 8, 61, 65, 16, 4, 6, 40]
ov = {"jingle": [], "sting": [], "sfx": [], "voice_tag": []}
melodies = {}

def add_ov(kind, dst, source, **extra):
    add_clip(kind, dst, extra.get("text"), extra.get("voice"))
    clips[-1]["source"] = source
    ov[kind].append(len(clips) - 1)

def jingle_notes(d, transpose=0, seed=None):
    r = random.Random(seed)
    root = 55 + r.randrange(12)
    beat = r.uniform(0.12, 0.25)
    notes, t = [], 0.0
    while t < d:
        step = beat * r.choice([1, 1, 2, 1.5])
        p = root + r.choice(SCALE) + transpose
        notes.append((t, step * 1.1, 0, p, 100))
        if r.random() < 0.3:
            notes.append((t, step * 1.1, 0, p - 12, 80))
        t += step
    return notes

def sting_notes(d, transpose=0, seed=None):
    r = random.Random(seed)
    root = 50 + r.randrange(14) + transpose
    chord = [0, 4, 7, 12] if r.random() < 0.5 else [0, 3, 7, 12]
    step = r.uniform(0.06, 0.12)
    notes = [(k * step, d, 0, root + c, 110) for k, c in enumerate(chord)]
    notes.append((len(chord) * step, d, 1, root - 12, 110))
    return notes

jd = [1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 2.5, 1.2]
for i, d in enumerate(jd):
    prog = INSTRUMENTS[i % len(INSTRUMENTS)]
    seed = 5000 + i
    dst = f"{out}/clips/short_jingle{i:02}.wav"
    render_midi(jingle_notes(d, 0, seed), {0: prog}, dst, d)
    add_ov("jingle", dst, "timidity")
    melodies[len(clips) - 1] = ("jingle", d, seed, {0: prog})
sd = [1.0, 1.5, 2.0, 2.5, 3.0, 1.2, 1.8, 2.2]
for i, d in enumerate(sd):
    progs = {0: INSTRUMENTS[(i * 5 + 3) % len(INSTRUMENTS)], 1: [32, 33, 58, 42][i % 4]}
    seed = 6000 + i
    dst = f"{out}/clips/sting{i:02}.wav"
    render_midi(sting_notes(d, 0, seed), progs, dst, d)
    add_ov("sting", dst, "timidity")
    melodies[len(clips) - 1] = ("sting", d, seed, progs)
SYNTH_SFX = [
    ("riser", 2.5, ["synth", "2.5", "sine", "300-3000", "synth", "2.5", "pinknoise", "mix", "fade", "0.2", "2.5", "0.1"]),
    ("zap", 1.2, ["synth", "1.2", "square", "2000-200", "fade", "0", "1.2", "0.4"]),
    ("whoosh", 2.0, ["synth", "2.0", "pinknoise", "fade", "h", "1.0", "2.0", "1.0", "highpass", "500"]),
    ("ping", 3.0, ["synth", "3.0", "sine", "880", "tremolo", "8", "80", "fade", "0", "3.0", "2.5"]),
    ("boing", 1.5, ["synth", "1.5", "sine", "1500:150", "fade", "0", "1.5", "0.5"]),
    ("buzz", 4.0, ["synth", "4.0", "sawtooth", "110", "tremolo", "20", "60"]),
]
for name, d, args in SYNTH_SFX:
    dst = f"{out}/clips/sfx_{name}.wav"
    sox("-n", "-r", str(RATE), "-c", "1", "-b", "16", dst, *args, "gain", "-n", "-3")
    add_ov("sfx", dst, "sox")
REAL_SFX = ["alarm-clock-elapsed", "complete", "message-new-instant", "phone-incoming-call",
            "phone-outgoing-busy", "phone-outgoing-calling", "service-login", "service-logout",
            "suspend-error", "trash-empty"]
for name in REAL_SFX:
    dst = f"{out}/clips/sfx_{name}.wav"
    norm(f"{SOUNDS}/{name}.oga", dst, ("gain", "-n", "-3"))
    add_ov("sfx", dst, "sound-theme-freedesktop")
TAGS = ["you are listening to the morning show", "stay with us", "this episode is brought to you by our listeners",
        "and now the news", "back after this", "subscribe wherever you get your podcasts"]
for i, text in enumerate(TAGS):
    voice = VOICES[(i * 3) % len(VOICES)]
    dst = f"{out}/clips/tag{i:02}.wav"
    speak(text, voice, 170, dst)
    add_ov("voice_tag", dst, "espeak-ng", text=text, voice=voice)
for name in ["front-left", "front-right", "rear-left", "rear-right"]:
    dst = f"{out}/clips/tag_{name}.wav"
    norm(f"{SOUNDS}/audio-channel-{name}.oga", dst, ("gain", "-n", "-3"))
    add_ov("voice_tag", dst, "sound-theme-freedesktop")

def music_bed(seconds, dst, seed):
    r = random.Random(seed)
    bar = r.uniform(1.8, 2.4)
    pad, keys = r.choice([48, 16, 94, 19]), r.choice([0, 4, 24, 46])
    root = 45 + r.randrange(7)
    notes, t = [], 0.0
    while t < seconds:
        c = root + r.choice([0, 5, 7, 9, 3])
        triad = [c, c + r.choice([3, 4]), c + 7]
        for p in triad:
            notes.append((t, bar, 0, p + 12, 60))
        for k in range(4):
            notes.append((t + k * bar / 4, bar / 4 * 0.9, 1, c - 12, 90))
        for k in range(8):
            notes.append((t + k * bar / 8, bar / 8, 2, triad[r.randrange(3)] + 24, 70))
            notes.append((t + k * bar / 8, 0.05, 9, 42, 60))
        notes.append((t, 0.1, 9, 36, 100)); notes.append((t + bar / 2, 0.1, 9, 36, 100))
        notes.append((t + bar / 4, 0.1, 9, 38, 90)); notes.append((t + 3 * bar / 4, 0.1, 9, 38, 90))
        t += bar
    render_midi(notes, {0: pad, 1: 33, 2: keys}, dst, seconds)

CELL = 10
RATIOS = [6, 0, -6, -12]
SCENES = 6
BG_RMS = 10 ** (-30 / 20)
groups = {k: ([c for j, c in enumerate(v) if j % 2 == 0], [c for j, c in enumerate(v) if j % 2 == 1]) for k, v in ov.items()}
for bi, bgkind in enumerate(["speech", "music"]):
    scenes = [[] for _ in range(SCENES)]
    turn = {}
    for r in RATIOS:
        for kind in ov:
            for i in range(CELL):
                s = i % SCENES
                g = groups[kind][s % 2]
                k = turn.get((kind, s % 2), 0)
                turn[(kind, s % 2)] = k + 1
                scenes[s].append((g[k % len(g)], r))
    for s, plan in enumerate(scenes):
        orng.shuffle(plan)
        base_id = 100 + bi * SCENES + s
        other = 1 - s % 2
        near = [("near_miss_transposed", groups["jingle"][other][s // 2 % len(groups["jingle"][other])]),
                ("near_miss_transposed", groups["sting"][other][s // 2 % len(groups["sting"][other])]),
                ("near_miss_other_voice", [c for c in groups["voice_tag"][other] if clips[c]["text"]][s // 2 % 2]),
                ("near_miss_other_voice", [c for c in groups["voice_tag"][other] if clips[c]["text"]][(s // 2 + 1) % 2])]
        slots = [("clip", p) for p in plan] + [("near", n) for n in near]
        orng.shuffle(slots)
        # Near-miss audio: the melody transposed, the words in another voice.
        audio = {}
        for k, (_, (kind, cid)) in enumerate([x for x in slots if x[0] == "near"]):
            p = f"{work}/near{base_id}_{k}.wav"
            c = clips[cid]
            if kind == "near_miss_transposed":
                mk, d, seed, progs = melodies[cid]
                shift = [2, 3, 5, -2, -3][(s + k) % 5]
                notes = (jingle_notes if mk == "jingle" else sting_notes)(d, shift, seed)
                render_midi(notes, progs, p, d)
            else:
                v = next(v for v in VOICES[::-1] if v != tuple(c["voice"]) and abs(v[1] - c["voice"][1]) >= 10)
                speak(c["text"], v, 170, p)
            audio[(kind, cid)] = samples(p)
        t = orng.uniform(3, 6)
        layout = []
        for what, x in slots:
            a = samples(f"{out}/{clips[x[0] if what == 'clip' else x[1]]['file']}") if what == "clip" else audio[x]
            layout.append((t, what, x, a))
            t += len(a) / RATE + orng.uniform(3, 7)
        seconds = t + 3
        bgf = f"{work}/scene{base_id}.wav"
        if bgkind == "speech":
            write(bgf, speech_piece(seconds, base_id, f"sc{base_id}"))
        else:
            music_bed(seconds, bgf, 7000 + base_id)
        bg = samples(bgf)
        n = int(seconds * RATE)
        if len(bg) < n:
            bg.extend([0] * (n - len(bg)))
        del bg[n:]
        level = BG_RMS / max(rms_of(bg), 1e-9)
        mix = array.array("h", (int(x * level) for x in bg))
        overall = rms_of(mix)
        items, present, negs = [], {}, []
        for at, what, x, a in layout:
            o = int(at * RATE)
            # A span where the background is sounding (not a pause between turns).
            for _ in range(10):
                if rms_of(mix, o, o + len(a)) >= 0.5 * overall:
                    break
                o += RATE // 10
            span = rms_of(mix, o, o + len(a))
            ratio = x[1] if what == "clip" else 0
            g = span * 10 ** (ratio / 20) / max(rms_of(a), 1e-9)
            for k, v in enumerate(a):
                if o + k < n:
                    mix[o + k] = max(-32768, min(32767, mix[o + k] + int(round(v * g))))
            if what == "clip":
                f = clips[x[0]]["file"]
                items.append({"clip": f, "kind": f"under_{bgkind}", "offset_s": round(o / RATE, 9), "speed": 1.0,
                              "ratio_db": ratio})
                present.setdefault(f, []).append(round(o / RATE, 9))
            else:
                f = clips[x[1]]["file"]
                items.append({"clip": f, "kind": x[0], "offset_s": None, "at_s": round(o / RATE, 9), "speed": 1.0,
                              "ratio_db": ratio})
                negs.append(f)
        scene = f"{work}/mix{base_id}.wav"
        with wave.open(scene, "wb") as w:
            w.setnchannels(1); w.setsampwidth(2); w.setframerate(RATE); w.writeframes(mix.tobytes())
        for cls, ext, args in (("mp3_64k", "mp3", ("-c:a", "libmp3lame", "-b:a", "64k")),
                               ("aac_96k", "m4a", ("-c:a", "aac", "-b:a", "96k"))):
            name = f"episodes/under_{bgkind}{s}-{cls}.{ext}"
            ffmpeg(scene, f"{out}/{name}", "-ar", "44100", *args)
            truth["episodes"].append({"file": name, "class": f"under_{bgkind}_{cls}", "base": base_id,
                                      "duration_s": n / RATE, "present": present, "items": items,
                                      "negatives": negs, "background": bgkind})
            print(f"  {name}", file=sys.stderr)
        os.remove(bgf)

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
