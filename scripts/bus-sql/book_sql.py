#!/usr/bin/env python3
"""The database-bus statements of the book's chapter on the buses (docs/src/buses.md, "The
database bus from other languages"), by dialect and name, so that the scripts here run the
book's text itself, not a copy.

Usage: book_sql.py postgres|sqlite NAME   prints the statement(s) named NAME (`-- NAME:`)."""
import pathlib
import sys

CHAPTER = pathlib.Path(__file__).resolve().parents[2] / "docs" / "src" / "buses.md"
SECTION = "### The database bus from other languages"


def statements(dialect):
    """{name: SQL text} of the dialect's block: the first ```sql block for postgres, the
    second for sqlite. A statement runs from its `-- name: …` line to the next blank line."""
    text = CHAPTER.read_text(encoding="utf-8")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = [b.split("```", 1)[0] for b in section.split("```sql\n")[1:]]
    block = blocks[{"postgres": 0, "sqlite": 1}[dialect]]
    named = {}
    for chunk in block.strip().split("\n\n"):
        first, _, sql = chunk.partition("\n")
        if not first.startswith("-- ") or ":" not in first:
            raise SystemExit(f"docs/src/buses.md: a {dialect} statement without a `-- name:` line: {chunk!r}")
        named[first[3:].split(":", 1)[0].strip()] = sql.strip()
    return named


def statement(dialect, name):
    named = statements(dialect)
    if name not in named:
        raise SystemExit(f"docs/src/buses.md has no {dialect} statement named {name!r}: {sorted(named)}")
    return named[name]


if __name__ == "__main__":
    print(statement(sys.argv[1], sys.argv[2]))
