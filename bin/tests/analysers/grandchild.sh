#!/bin/sh
# A test analyser that misbehaves for the process-group tests: it starts a child of its own
# (a long sleep, detached from the pipes), closes its standard output, writes the child's pid
# to the file $GRANDCHILD, and then hangs without exiting. Whoever gives up on it must stop the
# whole process group, the child included.
sleep 1000 </dev/null >/dev/null 2>&1 &
child=$!
exec >&-
echo "$child" > "$GRANDCHILD.tmp"
mv "$GRANDCHILD.tmp" "$GRANDCHILD"
sleep 1000 </dev/null >/dev/null 2>&1
