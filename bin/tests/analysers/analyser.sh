#!/bin/sh
# A test analyser speaking the archivist's analyser protocol (the book, docs/src/researchers.md), on the
# same text "audio" as analyser.py: an episode file is a line `DURATION <ns>` and lines
# `AT <offset_ns> <token>`; a clip file holds its token on its first line and, optionally, its
# duration on a second line `DURATION <ns>`. It reads the work item (one JSON line) on
# standard input and writes one JSON line per clip. It needs a POSIX shell and the POSIX
# utilities cat, sed, awk, head, sort and paste, nothing beyond POSIX in any of them.
# The item is compact JSON, and these tests' titles and paths have no quotes, braces,
# brackets or backslashes, so sed can take it apart: the "episode" object and each object of
# the "clips" array are flat, each with its "media_path" (and a clip with its "title").
set -eu
item=$(cat)
episode_path=$(printf '%s\n' "$item" | sed 's/.*"episode":{[^}]*"media_path":"\([^"]*\)".*/\1/')
case $episode_path in
/*) ;;
*) echo "media_path $episode_path is not absolute" >&2; exit 4 ;;
esac
duration=$(awk '$1 == "DURATION" { print $2 }' "$episode_path")
echo "analysing $episode_path" >&2
# The clips array, one object a line: {"...","media_path":"P",...,"title":"T"} (awk splits
# it: a newline in sed's replacement is not POSIX).
printf '%s\n' "$item" | sed 's/.*"clips":\[\([^]]*\)\].*/\1/' |
    awk '{ gsub(/[}],[{]/, "}\n{"); print }' |
while IFS= read -r clip || [ -n "$clip" ]; do
    [ -n "$clip" ] || continue
    path=$(printf '%s\n' "$clip" | sed 's/.*"media_path":"\([^"]*\)".*/\1/')
    title=$(printf '%s\n' "$clip" | sed 's/.*"title":"\([^"]*\)".*/\1/')
    case $path in
    /*) ;;
    *) echo "media_path $path is not absolute" >&2; exit 4 ;;
    esac
    token=$(head -n 1 "$path")
    clip_duration=$(awk 'NR == 2 && $1 == "DURATION" { print $2 }' "$path")
    offsets=$(awk -v t="$token" '$1 == "AT" && $3 == t { print $2 }' "$episode_path" |
        sort -n | paste -s -d, -)
    printf '{"clip_title":"%s","clip_offsets_ns":[%s],"clip_duration_ns":%s,"episode_duration_ns":%s}\n' \
        "$title" "$offsets" "${clip_duration:-4000000000}" "$duration"
done
