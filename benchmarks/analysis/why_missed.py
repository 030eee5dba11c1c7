#!/usr/bin/env python3
"""Why the analyser missed what it missed, on the accuracy benchmark's overlay classes.

    ACCURACY_MISSES=1 BENCH --overlay-only --no-baseline --no-peers --corpus DIR 2> misses.txt
    why_missed.py BENCH DIR misses.txt [NAME=VALUE,...]

BENCH is the accuracy benchmark's binary (target/release/deps/accuracy-*). Every MISS line
is probed (`BENCH --probe EPISODE CLIP`, the analyser's debug log) with every vote cluster
refined (min_votes=1, no screen), and the candidates within 0.64 s of the true offset tell
why: no cluster there ("no votes"), the wide search's best lag elsewhere, the right lag but
refused (its votes further off than the vote agreement: "off votes"; a rival within the
periodic margin: "periodic rival"), or accepted with fewer votes than the analyser needs
("few votes"), or scoring under the bar ("low correlation"), or refused by the judge of its
pieces ("pieces"). Prints one line a miss, then the counts by cause and clip kind."""
import os, re, subprocess, sys, collections
bench, corpus, misses = sys.argv[1], sys.argv[2], sys.argv[3]
extra = sys.argv[4] if len(sys.argv) > 4 else ""
# The analyser's bars (params.rs): the score, and the judge of pieces' share of it.
BAR, JUDGE_RATIO = 0.2, 0.7
rx = re.compile(r"MISS (\S+) (\S+) at ([0-9.]+) s \(([+-]?\d+) dB\)")
def num(l, k):
    m = re.search(k + r"=([-0-9.e]+)", l)
    return float(m.group(1)) if m else None
cats = collections.Counter(); rows = []
for line in sorted(set(open(misses))):  # the benchmark prints each miss once a table
    m = rx.search(line)
    if not m: continue
    ep, clip, at, db = m.group(1), m.group(2), float(m.group(3)), int(m.group(4))
    env = dict(os.environ, ACCURACY_PARAMS="min_votes=1,refine_screen=-1" + ("," + extra if extra else ""))
    p = subprocess.run([bench, "--probe", f"{corpus}/{ep}", f"{corpus}/{clip}"], env=env, capture_output=True, text=True)
    tf = at * 8000 / 128
    ev = collections.OrderedDict()
    dens = None
    last = None
    for l in p.stderr.splitlines():
        l = re.sub(r"\x1b\[[0-9;]*m", "", l)
        if "landmarks a second" in l:
            dens = float(l.split()[1]); continue
        fr = num(l, "frame")
        if fr is None: continue
        if "judged by its pieces" in l:
            if last is not None and last[0] == int(fr): ev[last]["pieces"] = num(l, "pieces")
            continue
        if "periodic: refused" in l:
            if last is not None and last[0] == int(fr): ev[last]["refused"] = True
            continue
        if abs(fr - tf) > 40: continue
        key = (int(fr), num(l, "speed"))
        last = key
        e = ev.setdefault(key, {"frame": fr})
        if "rival_mean" in l:
            e["best"], e["rival"], e["lag"] = num(l, "best_mean"), num(l, "rival_mean"), num(l, "lag")
            e["est"] = (fr * 128 + e["lag"]) / 8000
        elif "correlation=" in l:
            e["corr"], e["votes"] = num(l, "correlation"), int(num(l, "votes"))
    name = clip.split("/")[-1]
    kind = "sfx" if name.startswith("sfx") else "sting" if name.startswith("sting") else "jingle" if "jingle" in name else "tag"
    es = list(ev.values())
    right = [e for e in es if "est" in e and abs(e["est"] - at) < 0.01]
    if not es:
        c, d = "no votes", ""
    elif not right:
        e = max(es, key=lambda e: e.get("best", -1))
        c, d = "best lag elsewhere", f"best={e.get('best',0):.3f} est={e.get('est',0):.3f}"
    else:
        e = max(right, key=lambda e: e.get("corr", -1) if "corr" in e else e["best"])
        if e.get("refused"):
            c = "off votes" if abs(e["lag"]) > 320 else "periodic rival"
            d = f"best={e['best']:.3f} rival={e['rival']:.3f} gap={e['best']-e['rival']:.3f} lag={e['lag']:.0f}"
        elif e.get("corr", 0) < BAR:
            c, d = "low correlation", f"corr={e.get('corr',0):.3f} votes={e.get('votes')}"
        elif e.get("pieces", 1) < JUDGE_RATIO * e.get("corr", 0):
            c, d = "pieces", f"corr={e.get('corr',0):.3f} pieces={e['pieces']:.3f} votes={e.get('votes')}"
        elif e.get("votes", 0) < 4:
            c, d = "few votes", f"corr={e.get('corr',0):.3f} votes={e.get('votes')}"
        else:
            c, d = "other (screen/suppressed)", str(e)
    cats[(c, kind)] += 1
    cats[(c, "all")] += 1
    rows.append(f"{c:26} {kind:6} {db:+3} dens={dens} {ep.split('/')[-1]} {name} {at:.3f} {d}")
    print(rows[-1], flush=True)
print()
for (c, k), n in sorted(cats.items()): print(f"{c:26} {k:6} {n}")
