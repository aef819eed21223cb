#!/usr/bin/env python3
"""Dependencies point down: print the file-level cycles among src/ files; exit 1 on one.

A "file" here is a unit: `src/x/foo.c` with its header `src/x/foo.h` (a header alone is a unit
too). Unit A depends on unit B when
  - A's object file uses a symbol (function or variable) that B's object file defines: read
    from the compiled objects with `nm`, so macros, inline helpers and callbacks passed as
    pointers are seen exactly as the linker sees them; or
  - a file of A has `#include "b.h"` naming a header of B.
A cycle is a set of two or more units each reachable from the others (a strongly connected
component); for each one the script prints the edges inside it and the symbols or includes that
make them, so the fix is visible. Folders are checked the same way (src/agent/hot uses
src/agent/collect, so collect may not use hot), and against LAYERS below: the table of which
folder may use which (docs/architecture.md, "Layers"). A dependency between two folders that
the table does not allow fails, and so does a folder of src/ that is not in the table.

Usage: scripts/depcheck.py [BUILD_DIR]            (default: build; needs a compiled tree)
       scripts/depcheck.py [BUILD_DIR] --folders  also print which folder uses which
       scripts/depcheck.py [BUILD_DIR] --edges    also print every file-level edge
Run by `make lint`.
"""
import json
import os
import re
import subprocess
import sys
from collections import defaultdict

# The checkout the command is run in (so one copy of the script can check any worktree), else
# the one the script lives in.
ROOT = (os.getcwd() if os.path.isdir(os.path.join(os.getcwd(), "src"))
        else os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

# The layers (docs/architecture.md): each folder of src/ and the folders it may use. Arrows
# point down only; a folder may skip layers below it. Adding a folder, or letting one use
# another, is a change of the architecture: make it here and in docs/architecture.md together.
LAYERS = {
    "src/common": set(),
    "src/store": {"src/common"},
    "src/sql": {"src/store", "src/common"},
    "src/server": {"src/sql", "src/store", "src/common"},
    "src/remote": {"src/common"},
    "src/report": {"src/common"},
    "src/autograd": set(),  # the C++ extension: reached through a capsule, calls nothing of ours
    # the agent (probing._agent), in the training process
    "src/agent/base": {"src/server", "src/sql", "src/store", "src/common"},
    "src/agent/collect": {"src/agent/base", "src/remote", "src/server", "src/sql", "src/store",
                          "src/common"},
    "src/agent/hot": {"src/agent/collect", "src/agent/base", "src/autograd", "src/remote",
                      "src/server", "src/sql", "src/store", "src/common"},
    "src/agent/service": {"src/agent/hot", "src/agent/collect", "src/agent/base",
                          "src/autograd", "src/remote", "src/server", "src/sql", "src/store",
                          "src/common"},
    # the probing command, in the shell
    "src/cli": {"src/cli/cmd", "src/cli/client", "src/cli/out", "src/common"},  # dispatch
    "src/cli/cmd": {"src/cli/serve", "src/cli/mcp", "src/cli/client", "src/cli/out",
                    "src/report", "src/remote", "src/common"},
    "src/cli/mcp": {"src/cli/client", "src/cli/out", "src/report", "src/remote", "src/common"},
    "src/cli/serve": {"src/cli/client", "src/cli/out", "src/report", "src/server",
                      "src/common"},
    "src/cli/client": {"src/cli/out", "src/report", "src/remote", "src/sql", "src/common"},
    "src/cli/out": {"src/common"},
}


def unit_of(path):
    """src/x/foo.c or src/x/foo.h -> src/x/foo (paths relative to the repository root)."""
    return os.path.splitext(path)[0]


def source_objects(build):
    """Map each src/ source (relative path) to one object file compiled from it."""
    cc_path = os.path.join(build, "compile_commands.json")
    try:
        with open(cc_path) as f:
            commands = json.load(f)
    except OSError as e:
        sys.exit(f"depcheck: cannot read {cc_path} ({e.strerror}): build first (make build)")
    objs = {}
    for c in commands:
        src = os.path.relpath(os.path.join(c["directory"], c["file"]), ROOT)
        if not src.startswith("src/"):
            continue
        obj = os.path.join(c["directory"], c["output"])
        if os.path.exists(obj):
            # A source compiled into several targets defines the same symbols in each: one is
            # enough, and the library's object (not a test's) is preferred.
            if src not in objs or "tests" in objs[src]:
                objs[src] = obj
    if not objs:
        sys.exit(f"depcheck: no compiled src/ objects under {build}: build first (make build)")
    return objs


def symbols(obj):
    """(defined, undefined) global symbol names of one object file."""
    out = subprocess.run(["nm", "-P", obj], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            undefined.add(name)
        elif kind in "TDBRCVWGS" and kind.isupper():
            defined.add(name)
    return defined, undefined


def header_index():
    """basename -> list of headers under src/ (relative paths)."""
    idx = defaultdict(list)
    for d, _, files in os.walk(os.path.join(ROOT, "src")):
        for fn in files:
            if fn.endswith(".h"):
                idx[fn].append(os.path.relpath(os.path.join(d, fn), ROOT))
    return idx


def resolve_include(name, including, idx):
    """The src/ header a quoted include names, or None (system/python headers)."""
    cand = os.path.normpath(os.path.join(os.path.dirname(including), name))
    if os.path.exists(os.path.join(ROOT, cand)):
        return cand
    hits = idx.get(os.path.basename(name), [])
    if len(hits) == 1:
        return hits[0]
    for h in hits:                       # same folder first, then a path suffix match
        if h.endswith("/" + name):
            return h
    return None


def all_sources():
    out = []
    for d, _, files in os.walk(os.path.join(ROOT, "src")):
        for fn in files:
            if fn.endswith((".c", ".h", ".cc", ".cpp")):
                out.append(os.path.relpath(os.path.join(d, fn), ROOT))
    return sorted(out)


def check_layers(why):
    """The dependencies between folders that LAYERS does not allow, and the folders of src/ it
    does not name, as lines to print (empty when all is well)."""
    bad = []
    folders = {os.path.dirname(p) for p in all_sources()}
    for f in sorted(folders - set(LAYERS)):
        bad.append(f"folder {f} is not in the table of layers (LAYERS in scripts/depcheck.py): "
                   f"add it with the folders it may use, and to docs/architecture.md")
    pairs = defaultdict(list)
    for (a, b) in sorted(why):
        fa, fb = os.path.dirname(a), os.path.dirname(b)
        if fa != fb and fa in LAYERS and fb not in LAYERS[fa]:
            pairs[(fa, fb)].append(f"{os.path.relpath(a, fa)} -> {b}: "
                                   f"{', '.join(sorted(why[(a, b)])[:4])}")
    for (fa, fb), lines in sorted(pairs.items()):
        bad.append(f"{fa} may not use {fb} (LAYERS in scripts/depcheck.py):")
        bad.extend("  " + line for line in lines)
    return bad


def build_graph(build):
    objs = source_objects(build)
    defs = {}                            # symbol -> unit
    uses = {}                            # unit -> set of undefined symbols
    for src, obj in objs.items():
        d, u = symbols(obj)
        for s in d:
            defs.setdefault(s, unit_of(src))
        uses.setdefault(unit_of(src), set()).update(u)
    why = defaultdict(set)               # (a, b) -> reasons
    for a, us in uses.items():
        for s in us:
            b = defs.get(s)
            if b and b != a:
                why[(a, b)].add(s + "()")
    idx = header_index()
    for path in all_sources():
        with open(os.path.join(ROOT, path), errors="replace") as f:
            text = f.read()
        for inc in INCLUDE_RE.findall(text):
            h = resolve_include(inc, path, idx)
            if h and unit_of(h) != unit_of(path):
                why[(unit_of(path), unit_of(h))].add("#include " + os.path.basename(h))
    return why


def sccs(nodes, edges):
    """Tarjan's strongly connected components (iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(edges.get(root, ())))]
        index[root] = low[root] = counter[0]; counter[0] += 1
        stack.append(root); on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]; counter[0] += 1
                    stack.append(w); on.add(w)
                    work.append((w, iter(edges.get(w, ()))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop(); on.discard(w); comp.append(w)
                        if w == v:
                            break
                    out.append(sorted(comp))
    return out


def print_cycles(kind, cycles, edges, why):
    """Each cycle, then the edges inside it with up to four of the reasons for each."""
    for c in cycles:
        members = set(c)
        print(f"\ncycle among {len(c)} {kind}: {', '.join(c)}")
        for a in c:
            for b in sorted(edges[a] & members):
                reasons = sorted(why[(a, b)])
                more = f" (+{len(reasons) - 4} more)" if len(reasons) > 4 else ""
                print(f"  {a} -> {b}: {', '.join(reasons[:4])}{more}")


def main(argv):
    build = "build"
    flags = set()
    for a in argv[1:]:
        if a.startswith("--"):
            flags.add(a)
        else:
            build = a
    if not os.path.isabs(build):
        build = os.path.join(ROOT, build) if not os.path.isdir(build) else os.path.abspath(build)
    why = build_graph(build)
    edges = defaultdict(set)
    nodes = set()
    for a, b in why:
        edges[a].add(b)
        nodes.update((a, b))
    if "--edges" in flags:
        for (a, b) in sorted(why):
            print(f"{a} -> {b}: {', '.join(sorted(why[(a, b)])[:4])}")
    if "--folders" in flags:
        fol = defaultdict(int)
        for (a, b) in why:
            fa, fb = os.path.dirname(a), os.path.dirname(b)
            if fa != fb:
                fol[(fa, fb)] += 1
        for (fa, fb), n in sorted(fol.items()):
            print(f"{fa} -> {fb} ({n} file pairs)")
    cycles = [c for c in sccs(sorted(nodes), edges) if len(c) > 1]
    # Folders are layers too (src/sql, src/agent/hot, ...): a folder may use only folders that
    # never use it back, directly or around a loop.
    fedges, fwhy = defaultdict(set), defaultdict(set)
    for (a, b) in why:
        fa, fb = os.path.dirname(a), os.path.dirname(b)
        if fa != fb:
            fedges[fa].add(fb)
            fwhy[(fa, fb)].add(f"{os.path.basename(a)} -> {os.path.basename(b)}")
    fnodes = sorted(set(fedges) | {b for v in fedges.values() for b in v})
    fcycles = [c for c in sccs(fnodes, fedges) if len(c) > 1]
    bad = check_layers(why)
    nbad = sum(1 for line in bad if not line.startswith("  "))
    print(f"depcheck: {len(nodes)} files, {len(why)} file-level dependencies, "
          f"{len(cycles)} cycle(s) among files, {len(fcycles)} among folders, "
          f"{nbad} against the table of layers")
    print_cycles("folders", fcycles, fedges, fwhy)
    print_cycles("files", cycles, edges, why)
    if bad:
        print()
        print("\n".join(bad))
    return 1 if cycles or fcycles or bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
