"""Drives the peers a user would pick instead of archivist's analyser, on the corpus's files,
for the accuracy benchmark (analysis/benches/accuracy.rs), which starts it in the peers'
own virtualenv:

    peers.py TOOL EPISODE CLIP...
    peers.py TOOL --pairs FILE      (FILE: JSON lines {"episode": PATH, "clips": [PATH...]})

prints one JSON object a line per clip, in the order given: {"clip", "offsets_s", "scores"}
(with "episode" in --pairs mode), then {"seconds": wall time of the whole call, decoding
included}.

- aof: audio-offset-finder (BBC), MFCC cross-correlation; one offset per pair, kept when its
  standard score is above 10 (the tool's documented "good probability" mark); its best lag and
  score whatever the score, as "best_s" and "best_score". Driven
  through its Python API with the episode decoded once per episode (its command line decodes
  the episode again for every clip), at its defaults (8 kHz, hop 128).
- audalign: audalign's fingerprint recognizer at its defaults, each clip recognised against
  the episode; every match it reports is an offset.
"""
import json
import os
import sys
import tempfile
import time

tool = sys.argv[1]
if sys.argv[2] == "--pairs":
    with open(sys.argv[3]) as f:
        jobs = [json.loads(line) for line in f if line.strip()]
    jobs = [(j["episode"], j["clips"]) for j in jobs]
else:
    jobs = [(sys.argv[2], sys.argv[3:])]
start = time.monotonic()
out = []


def run(episode, clips):
    if tool == "aof":
        return run_aof(episode, clips)
    if tool == "audalign":
        return run_audalign(episode, clips)
    sys.exit(f"unknown tool {tool}")


def run_aof(episode, clips):
    out = []
    from audio_offset_finder import audio_offset_finder as aof
    from scipy.io import wavfile

    def load(path):
        tmp = aof.convert_and_trim(path, 8000, None)
        data = wavfile.read(tmp, mmap=False)[1].astype(float)
        os.remove(tmp)
        return data

    ep = load(episode)
    for c in clips:
        try:
            r = aof.find_offset_between_buffers(ep, load(c), 8000)
            found = r["standard_score"] > 10 and r["time_offset"] >= -0.05
            out.append({"clip": c, "offsets_s": [max(0.0, r["time_offset"])] if found else [],
                        "scores": [float(r["standard_score"])] if found else [],
                        "best_s": float(r["time_offset"]), "best_score": float(r["standard_score"])})
        except Exception as e:  # too short, undecodable: reported, not fatal
            out.append({"clip": c, "offsets_s": [], "scores": [], "error": str(e)})
    return out


def run_audalign(episode, clips):
    import audalign as ad

    out = []
    rec = ad.FingerprintRecognizer()
    with tempfile.TemporaryDirectory() as d:
        link = os.path.join(d, os.path.basename(episode))
        os.symlink(os.path.abspath(episode), link)
        for c in clips:
            try:
                res = ad.recognize(c, d, recognizer=rec)
            except Exception as e:
                out.append({"clip": c, "offsets_s": [], "scores": [], "error": str(e)})
                continue
            offsets, scores = [], []
            match = (res or {}).get("match_info", {}).get(os.path.basename(episode))
            if match:
                # offset_seconds: where the target (clip) lies in the against file.
                for o, conf in zip(match.get("offset_seconds", []), match.get("confidence", [])):
                    offsets.append(float(o))
                    scores.append(float(conf))
            out.append({"clip": c, "offsets_s": offsets, "scores": scores})
    return out


for episode, clips in jobs:
    for o in run(episode, clips):
        if len(jobs) > 1 or sys.argv[2] == "--pairs":
            o["episode"] = episode
        out.append(o)
for o in out:
    print(json.dumps(o))
print(json.dumps({"seconds": time.monotonic() - start}))
