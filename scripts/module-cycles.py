#!/usr/bin/env python3
"""Lists cycles between the top-level modules of each library crate (src/<module>[.rs|/]).

A module's edges are the other top-level modules its code names, anywhere in it (`use`
lines, and paths in function bodies, `impl` blocks, types and attributes):
- `crate::<module>` and `crate::{<module>, ...}`;
- `super::...` chains, resolved from the file's own place (`super::<module>` in a
  top-level file is `crate::<module>`);
- a name the crate root re-exports (`pub use <module>::...Name` in lib.rs), named as
  `crate::Name` or inside `crate::{...}`;
- a call of a method that an inherent `impl Name` block of this module adds to a type
  another module defines: `Name::method(` anywhere, or `self.method(` /
  `Self::method(` in the type's own module (a method call names no module, so the
  `impl` is the only trace it leaves).
Test code (`#[cfg(test)]` items and modules) may reach anywhere and is left out, as
are comments and string literals. Exit status 1 when a cycle exists.

Usage: scripts/module-cycles.py [CRATE_DIR ...] (default: every library crate and
the Python module).
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRATES = ("augment", "loader", "trainer", "python")


def strip_comments_and_strings(text):
    """Blanks comments, string and char literals (keeping their line breaks)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif m := re.match(r'b?r(#*)"', text[i:i + 260]):
            # A raw string: up to the closing quote and as many #.
            end = '"' + m.group(1)
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and (m := re.match(r"b?'(\\.[^']*|[^'\\])'", text[i:i + 12])):
            out.append("' '")
            i += m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def item_end(text, i):
    """The end of the item starting at `i`: its closing brace, or the semicolon (or,
    for a field or a match arm, the comma) that ends it."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c in "{([":
            depth += 1
        elif c in "})]":
            depth -= 1
            if depth < 0:
                return i
            if depth == 0 and c == "}":
                return i + 1
        elif c in ";," and depth == 0:
            return i + 1
        i += 1
    return i


def strip_test_items(text):
    """Removes every item under `#[cfg(test)]` (a test module, a test-only helper)."""
    while m := re.search(r"#\[cfg\(test\)\]", text):
        text = text[: m.start()] + text[item_end(text, m.end()):]
    return text


def module_path(src, path):
    """The file's module path below the crate root: src/a/b.rs and src/a/b/mod.rs are
    ["a", "b"]; src/a.rs is ["a"]."""
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    return rel


def is_module(src, name):
    return os.path.exists(os.path.join(src, name + ".rs")) or os.path.isdir(
        os.path.join(src, name)
    )


def reexports(src):
    """Name -> module for the crate root's `pub use module::...` lines."""
    out = {}
    lib = os.path.join(src, "lib.rs")
    if not os.path.exists(lib):
        return out
    text = strip_comments_and_strings(open(lib).read())
    for m in re.finditer(r"pub use (\w+)::([^;]+);", text):
        module, rest = m.group(1), m.group(2)
        for name in re.findall(r"\b([A-Za-z_]\w*)\b", rest):
            out[name] = module
    return out


def sources(src):
    for dirpath, _, files in os.walk(src):
        if os.path.relpath(dirpath, src).split(os.sep)[0] == "bin":
            continue
        for f in sorted(files):
            if f.endswith(".rs") and not (dirpath == src and f in ("lib.rs", "main.rs")):
                path = os.path.join(dirpath, f)
                text = open(path).read()
                yield path, strip_test_items(strip_comments_and_strings(text))


def names_used(src, path, text, names):
    """The top-level modules (and re-exported names) that `text` names by path."""
    used = set(re.findall(r"\bcrate::(\w+)", text))
    for group in re.findall(r"\bcrate::\{([^}]*)\}", text):
        used.update(re.findall(r"\b(\w+)\b", group))
    # `super::super::x`: up as many levels as there are `super`s, from the module
    # this file is (a mod.rs is its folder's module).
    here = module_path(src, path)
    for m in re.finditer(r"\b((?:super::)+)(\{[^}]*\}|\w+)", text):
        ups = m.group(1).count("super")
        base = here[: len(here) - ups] if ups <= len(here) else None
        if base is None:
            continue
        tails = re.findall(r"\b(\w+)\b", m.group(2))
        for t in tails:
            used.add((base + [t])[0])
    return used | {names[n] for n in used if n in names}


def defined_types(text):
    return set(re.findall(r"\b(?:struct|enum|union)\s+([A-Z]\w*)", text))


def inherent_impls(text):
    """(type, method names) of every inherent `impl` block (not `impl Trait for Type`)."""
    out = []
    for m in re.finditer(r"(?m)^[ \t]*(?:unsafe\s+)?impl\b", text):
        brace = text.find("{", m.end())
        head = text[m.end(): brace]
        # Drop the impl's own generics: `impl<T: Bound> Name<T>`.
        if head.startswith("<"):
            depth, j = 0, 0
            for j, c in enumerate(head):
                depth += {"<": 1, ">": -1}.get(c, 0)
                if depth == 0:
                    break
            head = head[j + 1:]
        if re.search(r"\bfor\b", head.split(" where ")[0]):
            continue
        if t := re.match(r"\s*(?:crate::)?(?:\w+::)*([A-Z]\w*)", head):
            body = text[brace: item_end(text, brace)]
            out.append((t.group(1), set(re.findall(r"\bfn\s+(\w+)", body))))
    return out


def graph(crate_dir):
    src = os.path.join(crate_dir, "src")
    names = reexports(src)
    edges, defines, impls, texts = {}, {}, [], {}
    for path, text in sources(src):
        me = module_path(src, path)[0]
        texts[me] = texts.get(me, "") + text
        mods = {m for m in names_used(src, path, text, names) if is_module(src, m)}
        edges.setdefault(me, set()).update(mods - {me})
        for t in defined_types(text):
            defines.setdefault(t, set()).add(me)
        impls += [(me, t, fns) for t, fns in inherent_impls(text)]
    # Methods added to another module's type: a call to one (`Type::method(`, or the
    # type's own module calling `self.method(`) depends on the module that adds it. A
    # call through another value names no type, and is not seen.
    for me, t, fns in impls:
        owners = defines.get(t, set())
        # Only a name one module defines is followed (the same name in two modules
        # would need paths resolved to say which).
        if len(owners) != 1 or me in owners or not fns:
            continue
        owner = next(iter(owners))
        alt = "|".join(sorted(fns))
        by_type = re.compile(rf"\b{t}::(?:{alt})\b")
        by_self = re.compile(rf"(?:\bself\.|\bSelf::)(?:{alt})\b")
        for other, text in texts.items():
            if other != me and (
                by_type.search(text) or (other == owner and by_self.search(text))
            ):
                edges.setdefault(other, set()).add(me)
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
    crates = sys.argv[1:] or [os.path.join(ROOT, d) for d in CRATES]
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
