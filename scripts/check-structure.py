#!/usr/bin/env python3
"""Check the structure of src/: no file over 800 lines, no import circles between files, and no
import of a higher layer. Run by CI (.ci/run); exits 1 naming the offending files and imports
(file:line) when any fails.

The layers, bottom up (a module may import from its own layer and the ones left of it):
    error, gguf, tensor, backend, sampler, vision, model, hub, cli
(lib.rs and main.rs only declare and re-export.)

What counts as an import of file A by file B: a `use` of an item or module defined in A, or a
path in code naming one (`crate::…`, `super::…`, `self::…`, or a child module `child::…`). A
circle is a loop of such imports; an import of a module that encloses the importer (a child's
`super::CpuBackend`) does not close one: the enclosing module declares and dispatches to its
children, which build on what it defines, as in any Rust crate. Not counted at all: `mod`
declarations; `pub use` re-exports, which are resolved through to the module that
defines the item (a facade like model/mod.rs re-exporting its children is not a dependency);
test code (`#[cfg(test)]` items), whose helpers may cross between modules freely; paths in
comments and strings. Inline modules (`mod x86 { … }`) belong to their file.
"""

import os
import re
import sys

MAX_LINES = 800
LAYERS = ["error", "gguf", "tensor", "backend", "sampler", "vision", "model", "hub", "cli"]
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")


def strip(text):
    """Comments and string/char literals blanked (newlines kept, so line numbers hold)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:]) and (i == 0 or not text[i - 1].isalnum()):
            m = re.match(r'r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + len(m.group(0)))
            j = n if end < 0 else end + 1 + len(m.group(1))
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i : j + 1]))
            i = j + 1
        elif c == "'":
            # A char literal ('a', '\n', '\u{..}'), not a lifetime ('a).
            m = re.match(r"'(\\.[^']*|[^'\\])'", text[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching_brace(text, i):
    """Index just past the brace that closes the one at `i`."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def drop_test_items(text):
    """Blank items under `#[cfg(test)]` (or `#[cfg(all(test, …))]`)."""
    while True:
        m = re.search(r"#\[cfg\((all\()?test\b[^\]]*\]", text)
        if not m:
            return text
        j = m.end()
        semi, brace = text.find(";", j), text.find("{", j)
        if brace < 0 or (0 <= semi < brace):
            end = semi + 1
        else:
            end = matching_brace(text, brace)
        text = text[: m.start()] + re.sub(r"[^\n]", " ", text[m.start() : end]) + text[end:]


def module_of(path):
    rel = os.path.relpath(path, ROOT).replace(os.sep, "/")[: -len(".rs")]
    parts = rel.split("/")
    if parts[-1] in ("mod", "lib"):
        parts = parts[:-1]
    return tuple(parts)


def expand_use(tree):
    """`a::{b, c::{self, d}}` → [a::b, a::c, a::c::d] (aliases dropped)."""
    tree = re.sub(r"\s+as\s+\w+", "", tree)
    tree = re.sub(r"\s+", "", tree)
    m = re.match(r"^(.*?)\{(.*)\}$", tree)
    if not m:
        return [tree]
    prefix, inner = m.group(1), m.group(2)
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    out = []
    for p in filter(None, parts):
        if p == "self":
            out.append(prefix.rstrip(":"))
        else:
            out.extend(expand_use(prefix + p))
    return out


class Crate:
    def __init__(self):
        self.files = {}  # module path -> file
        self.owner = {}  # module path (files and inline modules) -> file
        self.children = {}  # module path -> set of child names
        self.reexports = {}  # (module path, name) -> [path segments], from `pub use`
        self.texts = {}
        for dirpath, _, names in os.walk(ROOT):
            for name in names:
                if name.endswith(".rs") and not (dirpath == ROOT and name == "main.rs"):
                    path = os.path.join(dirpath, name)
                    mod = module_of(path)
                    self.files[mod] = path
                    self.owner[mod] = path
                    self.texts[path] = drop_test_items(strip(open(path, encoding="utf-8").read()))
        for path, text in self.texts.items():
            for mod, start, end in self.scopes(path, text):
                body = self.own(text, start, end, path)
                for m in re.finditer(r"\bmod\s+(\w+)\s*([;{])", body):
                    self.children.setdefault(mod, set()).add(m.group(1))
                    if m.group(2) == "{":
                        self.owner[mod + (m.group(1),)] = path
                for m in re.finditer(r"\bpub(\([^)]*\))?\s+use\s+([^;]+);", body):
                    for p in expand_use(m.group(2)):
                        name = p.split("::")[-1]
                        self.reexports[(mod, name)] = (mod, p.split("::"))

    def scopes(self, path, text):
        """(module path, start, end) of the file's module and each inline module in it."""
        base = [k for k, v in self.files.items() if v == path][0]
        found = [(base, 0, len(text))]

        def walk(mod, start, end):
            for m in re.finditer(r"\bmod\s+(\w+)\s*\{", text[start:end]):
                s = start + m.end() - 1
                e = matching_brace(text, s)
                if any(s > a and e <= b and (a, b) != (start, end) for _, a, b in found[1:]):
                    continue
                child = mod + (m.group(1),)
                found.append((child, s, e))
                walk(child, s + 1, e - 1)

        walk(base, 0, len(text))
        return found

    def own(self, text, start, end, path):
        """The text of a scope with its nested inline modules blanked."""
        body = text[start:end]
        for mod, s, e in self.scopes(path, text):
            if start < s and e <= end and (s, e) != (start, end):
                body = body[: s - start] + re.sub(r"[^\n]", " ", body[s - start : e - start]) + body[e - start :]
        return body

    def resolve(self, mod, segs, seen=()):
        """The file that defines what `segs` (a path written in module `mod`) names, or None."""
        if not segs:
            return None
        if segs[0] == "crate":
            cur, rest = (), segs[1:]
        elif segs[0] in ("self", "super"):
            cur, rest = mod, segs
            while rest and rest[0] in ("self", "super"):
                cur = cur if rest[0] == "self" else cur[:-1]
                rest = rest[1:]
        elif segs[0] in self.children.get(mod, ()):
            cur, rest = mod, segs
        else:
            return None  # an external crate, or a name from a `use` already counted
        while rest and cur + (rest[0],) in self.owner:
            cur, rest = cur + (rest[0],), rest[1:]
        if rest and (cur, rest[0]) in self.reexports and (cur, rest[0]) not in seen:
            emod, target = self.reexports[(cur, rest[0])]
            return self.resolve(emod, target + rest[1:], seen + ((cur, rest[0]),))
        return self.owner.get(cur)

    def edges(self):
        """(from file, to file, line) for every import between two files."""
        out = []
        for path, text in self.texts.items():
            for mod, start, end in self.scopes(path, text):
                body = self.own(text, start, end, path)
                line_at = lambda i: text.count("\n", 0, start + i) + 1  # noqa: E731
                uses = list(re.finditer(r"(?<![\w(])use\s+([^;]+);", body))
                spans = []
                for m in uses:
                    spans.append((m.start(), m.end()))
                    before = body[max(0, m.start() - 12) : m.start()]
                    if re.search(r"\bpub(\([^)]*\))?\s*$", before):
                        continue  # a re-export, resolved through by `resolve`
                    for p in expand_use(m.group(1)):
                        target = self.resolve(mod, p.split("::"))
                        if target and target != path:
                            out.append((path, target, line_at(m.start())))
                code = body
                for s, e in spans:
                    code = code[:s] + re.sub(r"[^\n]", " ", code[s:e]) + code[e:]
                for m in re.finditer(r"(?<![\w:])([a-z_]\w*(?:::\w+)+)", code):
                    target = self.resolve(mod, m.group(1).split("::"))
                    if target and target != path:
                        out.append((path, target, line_at(m.start())))
        return out


def encloses(outer, inner):
    """Whether module file `outer` is an ancestor of module file `inner`."""
    o, i = module_of(outer), module_of(inner)
    return len(o) < len(i) and i[: len(o)] == o


def cycles(edges):
    graph = {}
    for a, b, _ in edges:
        if not encloses(b, a):
            graph.setdefault(a, set()).add(b)
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                sccs.append(sorted(scc))

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return sccs


def main():
    crate = Crate()
    edges = crate.edges()
    rel = lambda p: os.path.relpath(p, os.path.join(ROOT, "..")).replace(os.sep, "/")  # noqa: E731
    failures = 0
    for scc in cycles(edges):
        failures += 1
        print(f"import circle: {', '.join(rel(f) for f in scc)}")
        for a, b, line in sorted(set(edges)):
            if a in scc and b in scc and not encloses(b, a):
                print(f"  {rel(a)}:{line} imports {rel(b)}")
    top = lambda p: module_of(p)[0] if module_of(p) else None  # noqa: E731
    for a, b, line in sorted(set(edges)):
        ta, tb = top(a), top(b)
        if ta is None or tb is None or ta == tb:
            continue
        if ta not in LAYERS or tb not in LAYERS:
            failures += 1
            print(f"{rel(a)}:{line}: module '{ta if ta not in LAYERS else tb}' is in no layer")
        elif LAYERS.index(tb) > LAYERS.index(ta):
            failures += 1
            print(f"{rel(a)}:{line}: '{ta}' imports '{tb}', a higher layer ({' < '.join(LAYERS)})")
    for path in sorted(crate.texts):
        lines = open(path, encoding="utf-8").read().count("\n")
        if lines > MAX_LINES:
            failures += 1
            print(f"{rel(path)}: {lines} lines, more than {MAX_LINES}: split it by what its parts do")
    files = len(crate.files)
    if failures:
        print(f"check-structure: {failures} problem(s) in {files} files")
        return 1
    imports = len(set((a, b) for a, b, _ in edges))
    print(
        f"check-structure: {files} files of at most {MAX_LINES} lines, {imports} imports "
        "between files, no circles, no import of a higher layer"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
