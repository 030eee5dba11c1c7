#!/usr/bin/env python3
"""Could a coarse band-energy envelope, small enough to keep in an episode print, test a
candidate without its audio? Measured on the accuracy corpus's overlay episodes (MP3 64k).

    envelope_screen.py CORPUS [BANDS:HOPS ...]      (default 8:5 16:2 32:1; needs numpy)

The episode and each clip are decoded to 8 kHz mono (ffmpeg) and cut into the analyser's
frames (512 samples, hop 128, bins 6–240); the power of BANDS equal bands is averaged over
HOPS frames and taken as a log. The episode's envelope has its running mean over ±5 s taken
off, band by band (so a band that is always loud does not look like the clip). The statistic
at an offset is the Pearson correlation, over the clip's cells within 30 dB of its loudest,
between the clip's envelope and the episode's there. It is computed at every placement's true
offset and at 200 random offsets of the same episode for the same clip (chance: the clip
absent there), and the table gives the share of each at or above each threshold: a screen
must keep nearly every true offset and pass few chance ones."""
import json, random, subprocess, sys
import numpy as np

corpus = sys.argv[1]
shapes = [tuple(map(int, s.split(":"))) for s in sys.argv[2:]] or [(8, 5), (16, 2), (32, 1)]
truth = json.load(open(f"{corpus}/truth.json"))


def decode(path):
    raw = subprocess.run(["ffmpeg", "-v", "quiet", "-i", f"{corpus}/{path}", "-ac", "1", "-ar", "8000",
                          "-f", "f32le", "-"], capture_output=True, check=True).stdout
    return np.frombuffer(raw, dtype=np.float32)


def power(x):
    n = (len(x) - 512) // 128 + 1
    if n <= 0:
        return np.zeros((0, 235))
    idx = np.arange(512)[None, :] + 128 * np.arange(n)[:, None]
    return (np.abs(np.fft.rfft(x[idx] * np.hanning(512).astype(np.float32), axis=1)) ** 2)[:, 6:241]


def envelope(p, bands, hops, phase=0):
    edges = np.linspace(0, p.shape[1], bands + 1).astype(int)
    b = np.stack([p[phase:, edges[i]:edges[i + 1]].sum(1) for i in range(bands)], 1)
    m = len(b) // hops
    return np.log(b[: m * hops].reshape(m, hops, bands).mean(1) + 1e-10)


def less_running_mean(e, radius):
    c = np.cumsum(np.vstack([np.zeros((1, e.shape[1])), e]), 0)
    i = np.arange(len(e))
    lo, hi = np.clip(i - radius, 0, len(e)), np.clip(i + radius + 1, 0, len(e))
    return e - (c[hi] - c[lo]) / (hi - lo)[:, None]


def statistic(clip, episode, at):
    if at < 0 or at + len(clip) > len(episode):
        return np.nan
    loud = clip > clip.max() - np.log(1000.0)
    a, b = clip[loud], episode[at:at + len(clip)][loud]
    if a.std() < 1e-6 or b.std() < 1e-6:
        return 0.0
    return float(np.corrcoef(a, b)[0, 1])


episodes = [e for e in truth["episodes"] if e["class"].startswith("under_") and "mp3" in e["class"]]
decoded = {e["file"]: power(decode(e["file"])) for e in episodes}
clips = {}
print("| bands × frame | threshold | true offsets passing | chance offsets passing |")
print("|---|---|---|---|")
for bands, hops in shapes:
    random.seed(1)
    true, chance = [], []
    for e in episodes:
        p = decoded[e["file"]]
        radius = round(5 * 8000 / 128 / hops)
        phases = [less_running_mean(envelope(p, bands, hops, ph), radius) for ph in range(hops)]
        for item in e["items"]:
            if item["offset_s"] is None:
                continue
            key = (item["clip"], bands, hops)
            if key not in clips:
                clips[key] = envelope(power(decode(item["clip"])), bands, hops)
            c = clips[key]
            frame = round(item["offset_s"] * 8000 / 128)
            true.append(statistic(c, phases[frame % hops], frame // hops))
            for _ in range(200):
                r = random.randrange(len(phases[0]) - len(c))
                if abs(r - frame // hops) > 30:
                    chance.append(statistic(c, phases[0], r))
    t, ch = np.array(true), np.array(chance)
    for th in (0.2, 0.3, 0.4, 0.5):
        print(f"| {bands} × {hops * 16} ms | {th} | {np.nanmean(t >= th):.3f} of {len(t)} "
              f"| {np.nanmean(ch >= th):.4f} of {len(ch)} |")
