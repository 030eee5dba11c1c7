#!/usr/bin/env bash
# Generates the formats-as-published corpus, deterministically, with Debian's espeak-ng, sox
# and ffmpeg (installed if missing), and writes its truth file (truth.json): where each clip
# is in each file, written by this generator; the analyser never writes it.
#
#   scripts/make-formats-corpus.sh [OUT]     (OUT: target/formats-corpus)
#
# One episode (about four minutes of espeak-ng speech over a `sox synth` music bed, 44.1 kHz)
# with four clips at known offsets, rendered as podcasts publish episodes: a plain MP3 (the
# reference), VBR MP3 with a 2 MB cover picture, 22.05 kHz mono MP3, 8 kHz MPEG-2.5 MP3, M4A
# (AAC) with chapters and a cover, raw ADTS AAC, 48 kHz FLAC, 24-bit WAV, MP3 behind a 512 KB
# padded ID3 tag, Ogg Opus, WebM Opus; stitched MP3s as dynamic ad insertion serves them (a
# stereo 128k 44.1 kHz pre-roll before a mono 64k episode; a 44.1 kHz pre-roll before a
# 22.05 kHz episode; an ad in the middle of a 22.05 kHz episode); and WAVs whose header
# lengths ffmpeg and sox read past (data length 0xFFFFFFF0 or 0x80000000, both lengths 0,
# both 0xFFFFFFFF). Measured by `cargo bench -p analysis --bench accuracy -- --formats OUT`.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=target/formats-corpus
for a in "$@"; do
  case "$a" in
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) OUT=$a ;;
  esac
done

need=()
for tool in espeak-ng sox ffmpeg; do command -v "$tool" >/dev/null || need+=("$tool"); done
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing ${need[*]} (apt)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends espeak-ng sox ffmpeg >/dev/null
fi

mkdir -p "$OUT"
exec python3 - "$OUT" <<'PY'
import json, os, random, struct, subprocess, sys, wave

out = sys.argv[1]
RATE = 44100
rng = random.Random(46)
for d in ("clips", "episodes", "work"):
    os.makedirs(f"{out}/{d}", exist_ok=True)
work = f"{out}/work"

def run(*args):
    subprocess.run(args, check=True, stdin=subprocess.DEVNULL)

def ffmpeg(*args):
    run("ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y", *args)

def sox(*args):
    run("sox", "-R", "-V1", *args)  # -R: repeatable

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
job word business issue side kind head house service friend father power hour game line end""".split()
VOICES = [("en-us", 50), ("en-gb", 40), ("en-gb-scotland", 45), ("en-us", 78), ("en-029", 32)]

def sentence():
    w = [rng.choice(WORDS) for _ in range(rng.randint(6, 12))]
    return "the " + " ".join(w) + "."

def speak(text, voice, speed, dst):
    tmp = dst + ".raw.wav"
    run("espeak-ng", "-v", voice[0], "-p", str(voice[1]), "-s", str(speed), "-w", tmp, text)
    sox(tmp, "-r", str(RATE), "-c", "1", "-b", "16", dst, "gain", "-n", "-3")
    os.remove(tmp)

# ------------------------------------------------------------------ clips
clips = []
for i, (voice, seconds) in enumerate([(VOICES[0], 4), (VOICES[2], 6), (VOICES[4], 3)]):
    raw = f"{work}/phrase{i}.wav"
    speak(" ".join(sentence() for _ in range(3)), voice, 165, raw)
    dst = f"{out}/clips/phrase{i}.wav"
    sox(raw, dst, "trim", "0", str(seconds))
    clips.append(dst)
notes = []
for k, semis in enumerate([0, 4, 7, 12, 7, 4, 0, 12, 14, 12]):
    n = f"{work}/note{k}.wav"
    f = 330 * 2 ** (semis / 12)
    sox("-n", "-r", str(RATE), "-c", "1", "-b", "16", n, "synth", "0.3", "pluck", f"{f:.2f}",
        "fade", "0", "0.3", "0.1", "gain", "-6")
    notes.append(n)
jingle = f"{out}/clips/jingle.wav"
sox(*notes, jingle, "gain", "-n", "-3")
clips.append(jingle)

# ------------------------------------------------------------------ the episode
def speech(seconds, tag):
    data = b""
    k = 0
    while len(data) < seconds * RATE * 2:
        p = f"{work}/{tag}{k}.wav"
        speak(" ".join(sentence() for _ in range(rng.randint(2, 4))), rng.choice(VOICES[:4]),
              rng.randint(150, 185), p)
        data += read(p) + b"\0\0" * int(RATE * rng.uniform(0.2, 0.5))
        os.remove(p)
        k += 1
    return data

# Talk, a clip, talk, ...: clips at known sample offsets (phrase 0 twice).
order = [0, 3, 1, 0, 2]
data = b""
present = {}
for n, c in enumerate(order):
    data += speech(rng.uniform(25, 40), f"talk{n}_")
    present.setdefault(c, []).append(len(data) // 2 / RATE)
    data += read(clips[c])
data += speech(20, "tail")
base = f"{work}/speech.wav"
write(base, data)
seconds = len(data) / 2 / RATE
parts = []
for k in range(int(seconds // 4) + 1):
    root = 110 * 2 ** (rng.randrange(12) / 12)
    p = f"{work}/bed{k}.wav"
    sox("-n", "-r", str(RATE), "-c", "1", "-b", "16", p, "synth", "4", "sine", f"{root:.2f}",
        "synth", "4", "sine", "mix", f"{root * 1.26:.2f}", "fade", "0.5", "4", "0.5", "gain", "-14")
    parts.append(p)
bedf = f"{work}/bed.wav"
sox(*parts, bedf, "trim", "0", f"{seconds}")
episode = f"{work}/episode.wav"
sox("-m", "-v", "1", base, "-v", "0.5", bedf, episode, "trim", "0", f"{seconds}")

# The ad: another voice over the jingle's notes, 7.5 s.
ad_raw = f"{work}/ad_raw.wav"
speak(" ".join(sentence() for _ in range(3)), ("en-gb-x-rp", 70), 175, ad_raw)
ad = f"{work}/ad.wav"
sox(ad_raw, ad, "trim", "0", "7.5", "pad", "0", "0", "trim", "0", "7.5")
ad_s = len(read(ad)) / 2 / RATE

# A 2 MB cover (noise: it does not compress) and chapters.
cover = f"{work}/cover.png"
ffmpeg("-f", "lavfi", "-i", "nullsrc=s=1000x1000,geq=random(1)*255:random(1)*255:random(1)*255",
       "-frames:v", "1", cover)
chapters = f"{work}/chapters.txt"
with open(chapters, "w") as f:
    f.write(";FFMETADATA1\n")
    for k in range(4):
        f.write(f"[CHAPTER]\nTIMEBASE=1/1000\nSTART={int(k * seconds * 250)}\n"
                f"END={int((k + 1) * seconds * 250)}\ntitle=part {k + 1}\n")

episodes = []
# -bitexact: no encoder version in the files, the same bytes on every run.
def emit(fmt, name, args, ad_at=None, reference=False):
    path = f"episodes/{name}"
    if args is not None:
        ffmpeg("-i", episode, *args, "-bitexact", f"{out}/{path}")
    episodes.append({"file": path, "format": fmt, "ad_at_s": ad_at,
                     "ad_s": ad_s if ad_at is not None else 0.0, "reference": reference})
    print(f"  {path}", file=sys.stderr)

MP3 = ["-c:a", "libmp3lame"]
emit("plain MP3 128k", "plain.mp3", MP3 + ["-b:a", "128k"], reference=True)
ffmpeg("-i", cover, "-i", episode, "-map", "1:a", "-map", "0:v", "-c:v", "copy",
       "-disposition:v", "attached_pic", "-id3v2_version", "3", *MP3, "-q:a", "4", "-bitexact",
       f"{out}/episodes/vbr-cover.mp3")
emit("VBR MP3, 2 MB cover", "vbr-cover.mp3", None)
emit("MP3 22.05 kHz mono 64k", "mono22.mp3", ["-ac", "1", "-ar", "22050"] + MP3 + ["-b:a", "64k"])
emit("MP3 8 kHz (MPEG-2.5) 16k", "mpeg25.mp3", ["-ac", "1", "-ar", "8000"] + MP3 + ["-b:a", "16k"])
ffmpeg("-i", episode, "-i", chapters, "-i", cover, "-map", "0:a", "-map", "2:v", "-map_chapters", "1",
       "-c:v", "png", "-disposition:v", "attached_pic", "-c:a", "aac", "-b:a", "96k", "-bitexact",
       f"{out}/episodes/chapters-cover.m4a")
emit("M4A (AAC), chapters, cover", "chapters-cover.m4a", None)
emit("raw ADTS AAC", "adts.aac", ["-c:a", "aac", "-b:a", "96k", "-f", "adts"])
emit("FLAC 48 kHz", "hi.flac", ["-ar", "48000", "-c:a", "flac"])
emit("WAV 24-bit", "s24.wav", ["-c:a", "pcm_s24le"])
ffmpeg("-i", episode, *MP3, "-b:a", "128k", "-id3v2_version", "0", "-bitexact", f"{work}/no-id3.mp3")
size = 512 << 10
tag = b"ID3\x03\x00\x00" + bytes(((size - 10) >> (7 * i)) & 0x7f for i in (3, 2, 1, 0))
tag += b"TIT2\x00\x00\x00\x08\x00\x00\x00episode"
tag += b"\0" * (size - len(tag))
with open(f"{out}/episodes/padded-id3.mp3", "wb") as f, open(f"{work}/no-id3.mp3", "rb") as g:
    f.write(tag + g.read())
emit("MP3, 512 KB padded ID3", "padded-id3.mp3", None)
emit("Ogg Opus 64k", "episode.opus", ["-c:a", "libopus", "-b:a", "64k"])
emit("WebM Opus 64k", "episode.webm", ["-c:a", "libopus", "-b:a", "64k"])

# Stitched MP3s: segments without ID3 tags, byte-concatenated.
def seg(src, dst, *args):
    ffmpeg("-i", src, *args, "-id3v2_version", "0", "-bitexact", dst)
def cat(dst, *parts):
    with open(f"{out}/{dst}", "wb") as f:
        for p in parts:
            with open(p, "rb") as g:
                f.write(g.read())
seg(ad, f"{work}/ad-stereo.mp3", "-ac", "2", *MP3, "-b:a", "128k")
seg(episode, f"{work}/ep-mono44.mp3", "-ac", "1", *MP3, "-b:a", "64k")
seg(episode, f"{work}/ep-mono22.mp3", "-ac", "1", "-ar", "22050", *MP3, "-b:a", "64k")
cat("episodes/stitched-stereo-mono.mp3", f"{work}/ad-stereo.mp3", f"{work}/ep-mono44.mp3")
emit("stitched: stereo 128k ad + mono 64k", "stitched-stereo-mono.mp3", None, ad_at=0.0)
cat("episodes/stitched-44-22.mp3", f"{work}/ad-stereo.mp3", f"{work}/ep-mono22.mp3")
emit("stitched: 44.1 kHz ad + 22.05 kHz", "stitched-44-22.mp3", None, ad_at=0.0)
# The ad in the middle: between two clips, the episode cut at a sample boundary.
split = present[order[2]][0] - 5.0
cut = int(split * RATE) * 2
write(f"{work}/part1.wav", read(episode)[:cut])
write(f"{work}/part2.wav", read(episode)[cut:])
seg(f"{work}/part1.wav", f"{work}/part1.mp3", "-ac", "1", "-ar", "22050", *MP3, "-b:a", "64k")
seg(f"{work}/part2.wav", f"{work}/part2.mp3", "-ac", "1", "-ar", "22050", *MP3, "-b:a", "64k")
cat("episodes/stitched-middle.mp3", f"{work}/part1.mp3", f"{work}/ad-stereo.mp3", f"{work}/part2.mp3")
emit("stitched: ad in the middle", "stitched-middle.mp3", None, ad_at=int(split * RATE) / RATE)

# WAVs whose lengths ffmpeg and sox read past.
wav = open(episode, "rb").read()
assert wav[36:40] == b"data", "sox wrote a header other than the plain 44 bytes"
for name, riff, dat in [("len-fffffff0.wav", 0xFFFFFFF0, 0xFFFFFFF0),
                        ("len-80000000.wav", len(wav) - 8, 0x80000000),
                        ("len-zero.wav", 0, 0),
                        ("len-ffffffff.wav", 0xFFFFFFFF, 0xFFFFFFFF)]:
    b = bytearray(wav)
    b[4:8] = struct.pack("<I", riff)
    b[40:44] = struct.pack("<I", dat)
    with open(f"{out}/episodes/{name}", "wb") as f:
        f.write(b)
    emit(f"WAV, lengths {riff:#x}/{dat:#x}", name, None)

truth = {"rate": RATE, "clips": [f"clips/{os.path.basename(c)}" for c in clips],
         "duration_s": seconds, "present": {str(c): v for c, v in present.items()},
         "episodes": episodes}
with open(f"{out}/truth.json", "w") as f:
    json.dump(truth, f, indent=1)
print(f"formats corpus in {out}: {len(clips)} clips, {len(episodes)} files", file=sys.stderr)
PY
