#!/usr/bin/env python3
"""Keeps source files and functions small enough to read: fails on any Rust source file
over 700 lines or any function over 120 lines, and lists the functions over 80 lines (the
ones to split next). Run from anywhere: python3 scripts/check_sizes.py

A function's length counts from its `fn` line to its closing brace, doc comments and
attributes excluded. Braces inside strings, characters and comments are skipped.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MAX_FILE = 700
MAX_FN = 120
WARN_FN = 80

FN_START = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+\"[^\"]*\"\s+)?fn\s+(\w+)")


def code_only(line, state):
    """The line with strings, characters and comments blanked; `state` carries an open
    block comment or string across lines."""
    out = []
    i = 0
    while i < len(line):
        c = line[i]
        if state["block"]:
            if line.startswith("*/", i):
                state["block"] = False
                i += 2
                continue
            i += 1
            continue
        if state["string"]:
            if c == "\\":
                i += 2
                continue
            if c == '"':
                state["string"] = False
            i += 1
            continue
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            state["block"] = True
            i += 2
            continue
        if c == '"':
            state["string"] = True
            i += 1
            continue
        if c == "'":
            # A character literal ('x', '\n', '{'), not a lifetime ('a).
            m = re.match(r"'(\\.|[^\\'])'", line[i:])
            if m:
                i += len(m.group(0))
                continue
        out.append(c)
        i += 1
    return "".join(out)


def functions(path):
    """(name, first line, length) of every function with a body."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    state = {"block": False, "string": False}
    found = []
    stack = []  # (name, start line, depth at which its body opened)
    depth = 0
    nesting = 0  # open ( and [ of a signature: a `;` inside them ends nothing
    pending = None  # a `fn` line seen, its body's `{` not yet
    for number, raw in enumerate(lines, 1):
        m = FN_START.match(raw) if not state["block"] and not state["string"] else None
        code = code_only(raw, state)
        if m:
            pending = (m.group(7), number)
        for c in code:
            if c == "{":
                depth += 1
                if pending is not None:
                    stack.append((pending[0], pending[1], depth))
                    pending = None
            elif c == "}":
                if stack and stack[-1][2] == depth:
                    name, start, _ = stack.pop()
                    found.append((name, start, number - start + 1))
                depth -= 1
            elif c in "([":
                nesting += 1
            elif c in ")]":
                nesting -= 1
            elif c == ";" and pending is not None and nesting == 0:
                pending = None  # a declaration without a body (a trait's method)
    return found


def main():
    failures, warnings = [], []
    for base in ["crates"]:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, base)):
            dirnames[:] = [d for d in dirnames if d != "target"]
            for name in sorted(filenames):
                if not name.endswith(".rs"):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, ROOT)
                with open(path, encoding="utf-8") as f:
                    count = sum(1 for _ in f)
                if count > MAX_FILE:
                    failures.append(f"{rel}: {count} lines (at most {MAX_FILE})")
                for fn, start, length in functions(path):
                    where = f"{rel}:{start} fn {fn}: {length} lines"
                    if length > MAX_FN:
                        failures.append(f"{where} (at most {MAX_FN})")
                    elif length > WARN_FN:
                        warnings.append(where)
    for w in sorted(warnings):
        print(f"over {WARN_FN} lines: {w}")
    for f in failures:
        print(f"TOO LONG: {f}", file=sys.stderr)
    if failures:
        print(f"{len(failures)} files or functions over the limits; split them", file=sys.stderr)
        return 1
    print(f"sizes ok: no file over {MAX_FILE} lines, no function over {MAX_FN} ({len(warnings)} over {WARN_FN})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
