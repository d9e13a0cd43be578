#!/usr/bin/env python3
"""Lists cycles between the modules of each library crate (src/<module>[.rs|/]).

A module's edges are the other top-level modules its files name as `crate::<module>`
or `super::<module>` from a top-level file, or through the crate root's re-exports
(`use crate::{Name}` where lib.rs says `pub use <module>::...Name`). Exit status 1 when
a cycle exists. Usage: scripts/module-cycles.py [CRATE_DIR ...] (default: every crate).
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def top_module(src, path):
    rel = os.path.relpath(path, src)
    first = rel.split(os.sep)[0]
    return first[:-3] if first.endswith(".rs") else first


def strip_comments(text):
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def reexports(src):
    """Name -> module for the crate root's `pub use module::...` lines."""
    out = {}
    lib = os.path.join(src, "lib.rs")
    if not os.path.exists(lib):
        return out
    text = strip_comments(open(lib).read())
    for m in re.finditer(r"pub use (\w+)::([^;]+);", text):
        module, rest = m.group(1), m.group(2)
        for name in re.findall(r"\b([A-Za-z_]\w*)\b", rest):
            out[name] = module
    return out


def graph(crate_dir):
    src = os.path.join(crate_dir, "src")
    names = reexports(src)
    edges = {}
    for dirpath, _, files in os.walk(src):
        if os.path.relpath(dirpath, src).startswith("bin"):
            continue
        for f in files:
            if not f.endswith(".rs") or f in ("lib.rs", "main.rs"):
                continue
            path = os.path.join(dirpath, f)
            me = top_module(src, path)
            text = strip_comments(open(path).read())
            # Test modules may reach anywhere.
            text = text.split("#[cfg(test)]")[0]
            used = set(re.findall(r"\bcrate::(\w+)", text))
            for group in re.findall(r"\bcrate::\{([^}]*)\}", text):
                for name in re.findall(r"\b(\w+)\b", group):
                    used.add(names.get(name, name))
            for name in list(used):
                if name in names:
                    used.add(names[name])
            mods = {
                m
                for m in used
                if os.path.exists(os.path.join(src, m + ".rs"))
                or os.path.isdir(os.path.join(src, m))
            }
            edges.setdefault(me, set()).update(mods - {me})
    return edges


def cycles(edges):
    found, state, stack = [], {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if state.get(m) == 1:
                found.append(stack[stack.index(m):] + [m])
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(edges):
        if n not in state:
            visit(n)
    return found


def main():
    crates = sys.argv[1:] or [
        os.path.join(ROOT, d) for d in ("augment", "loader", "trainer")
    ]
    bad = False
    for c in crates:
        found = cycles(graph(c))
        name = os.path.relpath(c, ROOT)
        if found:
            bad = True
            for cyc in found:
                print(f"{name}: cycle {' -> '.join(cyc)}")
        else:
            print(f"{name}: no module cycles")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
