#!/usr/bin/env python3
"""No source file over 900 lines (issue 33): print each one that is longer; exit 1 on one.

Checked: the C and C++ sources and headers (.c .h .cc .cpp .hpp) and the Python and JavaScript
files (.py .js) under src/ and tests/. The limit is so that a newcomer can read a file, and hold
it in mind, in one sitting (docs/architecture.md, "File size"); a file that grows past it is
split along its sections (a shared fixture in its own file, as tests/unit/report_fixture.c).

Usage: scripts/linelimit.py [ROOT]                 (default: the checkout the command runs in)
Run by `make lint`.
"""
import os
import sys

LIMIT = 900
FOLDERS = ("src", "tests")
SUFFIXES = (".c", ".h", ".cc", ".cpp", ".hpp", ".py", ".js")


def too_long(root):
    """(relative path, lines) for each checked file over LIMIT lines, sorted by path."""
    found = []
    for folder in FOLDERS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, folder)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".")
                                 and d != "__pycache__")
            for name in sorted(filenames):
                if not name.endswith(SUFFIXES):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, "rb") as f:
                    lines = sum(1 for _ in f)
                if lines > LIMIT:
                    found.append((os.path.relpath(path, root), lines))
    return sorted(found)


def main():
    root = (sys.argv[1] if len(sys.argv) > 1
            else os.getcwd() if os.path.isdir(os.path.join(os.getcwd(), "src"))
            else os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    found = too_long(root)
    for path, lines in found:
        print(f"linelimit: {path}: {lines} lines, over the limit of {LIMIT}")
    if found:
        print(f"linelimit: {len(found)} file(s) over {LIMIT} lines. No source file under src/ or "
              f"tests/ may pass {LIMIT} lines (issue 33), so that a newcomer can read a file in "
              "one sitting (docs/architecture.md, \"File size\"): split it along its sections.")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
