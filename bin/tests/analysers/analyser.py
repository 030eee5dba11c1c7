#!/usr/bin/env python3
"""A test analyser speaking the archivist's analyser protocol (the book, docs/src/researchers.md).

It reads the work item (one JSON object) on standard input and writes one JSON line per clip
on standard output. The "audio" is text made by the tests: an episode file is a line
`DURATION <ns>` and lines `AT <offset_ns> <token>`; a clip file holds its token on its first
line, and its duration on an optional second line `DURATION <ns>`; a clip whose first line is
`NOT AUDIO` is rejected with a failure line. A clip occurs at the offsets of the AT lines
carrying its token.

A mode as the first argument makes it misbehave, for the tests of what the researcher does
then: `crash-after N` (exit 3 after N answers; with `MARKER` in the environment, only when
that file does not exist yet, creating it: the next try runs normally), `hang` (a progress line, then sleep),
`hang-after N` (N answers, then sleep: an analyser quiet between two clips), `wait-after N`
(N answers, then wait until the file `GATE` in the environment names exists: the test opens
the gate when it is ready), `fail` (a line
on standard error, then exit 1), `latin1-stderr` (a Latin-1 line and a `\r` progress bar on
standard error, a pause, more of them, then a normal run: its standard error must be read to
the end whatever it holds),
`garbage` (a line that is not JSON), `exit-75` (try later), `unknown-clip`, `progress`
(a progress line before each answer), `scores` (each answer with `clip_match_scores`: for
an offset of o ns, ((o // 1000000) % 101) / 100), `bad-scores` (a score of 1.5), `tick` (a progress line every 100 ms, for ever: it
ends when its output breaks). With `PIDFILE` in the environment it writes its pid
there when it starts (the tests' signal that it is running).

With `SCRIPT` and `STATE_DIR` in the environment, the mode is chosen per episode and per try
instead: `SCRIPT` is a JSON object from episode titles to a list of modes (each a list of
arguments), the first for the episode's first try, and so on; tries past the list run
normally. `STATE_DIR/tries-<title>` counts the episode's tries, written as each starts (the
tests wait on it).
"""
import json
import os
import re
import sys
import time


def read_episode(path):
    duration, marks = 0, []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2 and parts[0] == "DURATION":
                duration = int(parts[1])
            elif len(parts) == 3 and parts[0] == "AT":
                marks.append((int(parts[1]), parts[2]))
    return duration, marks


def read_clip(path):
    with open(path) as f:
        lines = [l.strip() for l in f.read().splitlines()]
    token = lines[0] if lines else ""
    duration = 4_000_000_000
    if len(lines) > 1 and lines[1].startswith("DURATION "):
        duration = int(lines[1].split()[1])
    return token, duration


def scripted(title, mode):
    script, state = os.environ.get("SCRIPT"), os.environ.get("STATE_DIR")
    if not script or not state:
        return mode
    counter = os.path.join(state, "tries-" + re.sub(r"[^A-Za-z0-9]", "_", title))
    tries = 0
    if os.path.exists(counter):
        with open(counter) as f:
            tries = int(f.read().strip() or "0")
    modes = json.loads(script).get(title, [])
    # Written whole, then renamed: a test reading it never sees a half-written count.
    with open(counter + ".tmp", "w") as f:
        f.write(str(tries + 1))
    os.replace(counter + ".tmp", counter)
    return modes[tries] if tries < len(modes) else [""]


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    mode = sys.argv[1:] or [""]
    if os.environ.get("PIDFILE"):
        with open(os.environ["PIDFILE"], "w") as f:
            f.write(str(os.getpid()))
    item = json.loads(sys.stdin.read())
    # The protocol promises absolute paths; the tests give relative ones too.
    for medium in [item["episode"]] + item["clips"]:
        if not os.path.isabs(medium["media_path"]):
            print(f"media_path {medium['media_path']!r} is not absolute", file=sys.stderr)
            return 4
    mode = scripted(item["episode"]["title"], mode)
    episode_duration, marks = read_episode(item["episode"]["media_path"])
    print(f"analysing {item['episode']['title']} with {len(item['clips'])} clips", file=sys.stderr)
    if mode[0] == "hang":
        say({"progress": "decoding"})
        time.sleep(3600)
    if mode[0] == "tick":
        # Writes until its output breaks (BrokenPipeError ends it).
        while True:
            say({"progress": "decoding"})
            time.sleep(0.1)
    if mode[0] == "garbage":
        print("this is not json", flush=True)
        return 0
    if mode[0] == "exit-75":
        return 75
    if mode[0] == "fail":
        print("no GPU found (failing on purpose)", file=sys.stderr, flush=True)
        return 1
    if mode[0] == "latin1-stderr":
        # As ffmpeg printing a Latin-1 tag: not UTF-8. The pause lets a reader that gave up
        # close the pipe, so that the next write would break.
        sys.stderr.buffer.write(b"title: caf\xe9 cr\xe8me\n 10%\r 50%\r")
        sys.stderr.buffer.flush()
        time.sleep(0.5)
        sys.stderr.buffer.write(b"100%\ralbum: \xc0 bient\xf4t\n")
        sys.stderr.buffer.flush()
    if mode[0] == "unknown-clip":
        say({"clip_title": "no such clip", "clip_offsets_ns": [], "clip_duration_ns": 1,
             "episode_duration_ns": episode_duration})
        return 0
    if mode[0] == "crash-after" and os.environ.get("MARKER"):
        if os.path.exists(os.environ["MARKER"]):
            mode = [""]
        else:
            open(os.environ["MARKER"], "w").close()
    answered = 0
    for clip in item["clips"]:
        if mode[0] == "crash-after" and answered == int(mode[1]):
            print("crashing on purpose", file=sys.stderr)
            return 3
        if mode[0] == "hang-after" and answered == int(mode[1]):
            time.sleep(3600)
        if mode[0] == "wait-after" and answered == int(mode[1]):
            while not os.path.exists(os.environ["GATE"]):
                time.sleep(0.05)
        if mode[0] == "progress":
            say({"progress": f"looking for {clip['title']}"})
        token, clip_duration = read_clip(clip["media_path"])
        if token == "NOT AUDIO":
            say({"clip_title": clip["title"], "failure": "not audio: no frames found"})
        else:
            offsets = sorted(o for o, t in marks if t == token)
            answer = {"clip_title": clip["title"], "clip_offsets_ns": offsets,
                      "clip_duration_ns": clip_duration, "episode_duration_ns": episode_duration}
            if mode[0] == "scores":
                answer["clip_match_scores"] = [((o // 1000000) % 101) / 100 for o in offsets]
            if mode[0] == "bad-scores":
                answer["clip_match_scores"] = [1.5 for _ in offsets]
            say(answer)
        answered += 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
