#!/usr/bin/env python3
"""Reports import circles between the files (modules) of each crate.

    python3 scripts/import_cycles.py [REPO]    exit 1 if any crate has a circle
    python3 scripts/import_cycles.py --self-test

A crate's module graph is read from its sources (Python stdlib only, no
rustc): its roots (`src/lib.rs`, `src/main.rs`, `src/bin/*.rs`, and for each
package its `examples/`, `tests/` and `benches/` targets), the files their
`mod x;` declarations reach, and every path starting with `crate::` or
`super::` (in a `use` tree, braces expanded, or inline in code) outside
comments and literals. A path names the deepest module file it goes
through; that makes an edge from the file it is written in to that file.

The rule: a module may use its ancestors and its descendants freely (a
folder's `mod.rs` declares and re-exports its children, a child uses what
its parent holds); those edges are not counted. Any other edge counts, and
a cycle among the counted edges is an import circle: two files (or more)
that each need the other, so neither can be read, tested or moved alone.
References from `#[cfg(test)]` modules count like any other: a test module
is part of its file.

Folders count too. The exception above lets a folder's `mod.rs` (or the
`x.rs` beside an `x/` folder) use its children and be used by them, so two
folders could need each other through their `mod.rs` files without any two
files making a circle. So the same graph is also read at every level: the
child modules of one module are siblings, each standing for its whole
subtree (a file module alone, or a folder with everything under it), and a
counted edge from a file in one sibling's subtree to a file in another's
is a use of that sibling. A cycle among the siblings of any module is an
import circle between folders, reported with the file edges that make it.
(A cycle among siblings that are all single files is a file circle, and
reported as one.)
"""

from __future__ import annotations

import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class Token:
    text: str
    line: int


def tokenize(src: str) -> list[Token]:
    """Identifiers and punctuation, with comments and literals dropped."""
    out: list[Token] = []
    i, n, line = 0, len(src), 1
    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    line += src[i] == "\n"
                    i += 1
        elif c == '"':
            i += 1
            while i < n and src[i] != '"':
                if src[i] == "\\":
                    i += 1
                line += i < n and src[i] == "\n"
                i += 1
            i += 1
        elif c == "'":
            # A char literal ('a', '\n', '\u{..}') or a lifetime ('a).
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", src[i:])
            i += len(m.group(0)) if m else 1
        elif c.isalpha() or c == "_":
            m = IDENT.match(src, i)
            word = m.group(0)
            raw = re.match(r"(#*)\"", src[m.end():])
            if word in ("r", "br") and raw:
                close = '"' + raw.group(1)
                start = m.end() + len(raw.group(0))
                end = src.find(close, start)
                end = n if end < 0 else end
                line += src.count("\n", i, end)
                i = end + len(close)
                continue
            out.append(Token(word, line))
            i = m.end()
        elif src.startswith("::", i):
            out.append(Token("::", line))
            i += 2
        else:
            out.append(Token(c, line))
            i += 1
    return out


def parse_tree(toks: list[Token], i: int, prefix: list[str]) -> tuple[list[list[str]], int]:
    """The paths of a use tree (or a code path) starting at toks[i]."""
    path = list(prefix)
    while i < len(toks):
        t = toks[i].text
        if t == "{":
            paths: list[list[str]] = []
            i += 1
            while i < len(toks) and toks[i].text != "}":
                if toks[i].text == ",":
                    i += 1
                    continue
                sub, i = parse_tree(toks, i, path)
                paths += sub
                # Skip an alias (`as x`) up to the next `,` or `}`.
                while i < len(toks) and toks[i].text not in (",", "}", "{"):
                    i += 1
            return paths or [path], i + 1
        if t == "*":
            return [path], i + 1
        if t == "self" and path:
            return [path], i + 1
        if IDENT.fullmatch(t):
            path.append(t)
            if i + 1 < len(toks) and toks[i + 1].text == "::":
                i += 2
                continue
            return [path], i + 1
        return [path], i
    return [path], i


@dataclass
class Module:
    path: tuple[str, ...]
    file: Path
    uses: list[tuple[tuple[str, ...], int]] = field(default_factory=list)


def child_file(dir_: Path, name: str) -> Path | None:
    for cand in (dir_ / f"{name}.rs", dir_ / name / "mod.rs"):
        if cand.is_file():
            return cand
    return None


def load_crate(root: Path) -> dict[tuple[str, ...], Module]:
    """Every file module reachable from the crate root `root`."""
    mods: dict[tuple[str, ...], Module] = {}
    todo = [((), root)]
    while todo:
        mpath, file = todo.pop()
        if mpath in mods:
            continue
        mod = Module(mpath, file)
        mods[mpath] = mod
        toks = tokenize(file.read_text(encoding="utf-8"))
        owns_dir = file.name in ("mod.rs", "lib.rs", "main.rs") or mpath == ()
        base = file.parent if owns_dir else file.parent / file.stem
        inline: list[tuple[str, int]] = []  # (name, brace depth it opened at)
        depth = 0
        i = 0
        while i < len(toks):
            t = toks[i].text
            if t == "{":
                depth += 1
            elif t == "}":
                depth -= 1
                if inline and inline[-1][1] == depth:
                    inline.pop()
            elif t == "mod" and i + 2 < len(toks) and IDENT.fullmatch(toks[i + 1].text):
                name, after = toks[i + 1].text, toks[i + 2].text
                if after == ";":
                    sub = child_file(base.joinpath(*[n for n, _ in inline]), name)
                    if sub is not None:
                        todo.append((mpath + tuple(n for n, _ in inline) + (name,), sub))
                elif after == "{":
                    inline.append((name, depth))
                    depth += 1
                    i += 3
                    continue
            elif t in ("crate", "super") and not (i > 0 and toks[i - 1].text in ("::", "$")):
                here = list(mpath) + [n for n, _ in inline]
                j, ups = i, 0
                if t == "super":
                    while j + 1 < len(toks) and toks[j].text == "super" and toks[j + 1].text == "::":
                        ups, j = ups + 1, j + 2
                    base_path = here[: len(here) - ups] if ups <= len(here) else []
                elif j + 1 < len(toks) and toks[j + 1].text == "::":
                    base_path, j = [], j + 2
                else:
                    i += 1
                    continue
                paths, _ = parse_tree(toks, j, base_path)
                for p in paths:
                    mod.uses.append((tuple(p), toks[i].line))
            i += 1
    return mods


def edges(mods: dict[tuple[str, ...], Module]) -> dict[tuple[str, ...], dict[tuple[str, ...], int]]:
    """Counted edges: from a module to the module file each path goes through."""
    graph: dict[tuple[str, ...], dict[tuple[str, ...], int]] = {m: {} for m in mods}
    for mod in mods.values():
        for path, line in mod.uses:
            target = max(
                (path[:k] for k in range(len(path) + 1) if path[:k] in mods),
                key=len,
            )
            a, b = mod.path, target
            related = a[: len(b)] == b or b[: len(a)] == a
            if not related:
                graph[a].setdefault(b, line)
    return graph


Edge = tuple[tuple[str, ...], int, tuple[str, ...]]  # (from file, line, to file)


def sibling_graphs(
    mods: dict[tuple[str, ...], Module],
    graph: dict[tuple[str, ...], dict[tuple[str, ...], int]],
) -> dict[tuple[str, ...], dict[tuple[str, ...], dict[tuple[str, ...], Edge]]]:
    """For each module with children, the edges among its children's subtrees.

    A counted edge a -> b belongs to the level of the deepest module both
    lie under: it is a use of b's subtree there by a's subtree. The edge
    kept for a pair of siblings is its first (by file, then line).
    """
    levels: dict = {}
    for m in mods:
        if m:
            levels.setdefault(m[:-1], {}).setdefault(m, {})
    for a in sorted(graph):
        for b, line in sorted(graph[a].items(), key=lambda e: (e[1], e[0])):
            k = 0
            while a[k] == b[k]:
                k += 1
            level = levels[a[:k]]
            level[a[: k + 1]].setdefault(b[: k + 1], (a, line, b))
    return levels


def cycles(graph: dict[tuple[str, ...], dict[tuple[str, ...], int]]) -> list[tuple[list, list]]:
    """Each strongly connected component of size > 1, with one cycle in it."""
    index: dict = {}
    low: dict = {}
    stack: list = []
    on: set = set()
    comps: list[list] = []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            strong(v)
    found = []
    for comp in comps:
        members = set(comp)
        start = min(comp)
        # Shortest way back to the start, inside the component.
        prev = {start: None}
        queue = [start]
        end = None
        while queue and end is None:
            v = queue.pop(0)
            for w in sorted(graph[v]):
                if w == start:
                    end = v
                    break
                if w in members and w not in prev:
                    prev[w] = v
                    queue.append(w)
        walk = [end]
        while prev[walk[-1]] is not None:
            walk.append(prev[walk[-1]])
        found.append((list(reversed(walk)), sorted(comp)))
    return found


def crate_roots(repo: Path) -> list[Path]:
    roots: list[Path] = []
    for manifest in sorted(repo.glob("**/Cargo.toml")):
        pkg = manifest.parent
        if "target" in pkg.relative_to(repo).parts:
            continue
        for pattern in (
            "src/lib.rs",
            "src/main.rs",
            "src/bin/*.rs",
            "examples/*.rs",
            "examples/*/main.rs",
            "tests/*.rs",
            "tests/*/main.rs",
            "benches/*.rs",
        ):
            roots += sorted(pkg.glob(pattern))
    return roots


def name(mods, m: tuple[str, ...], repo: Path) -> str:
    return str(mods[m].file.relative_to(repo))


def has_children(mods, m: tuple[str, ...]) -> bool:
    return any(len(o) == len(m) + 1 and o[: len(m)] == m for o in mods)


def subtree_name(mods, m: tuple[str, ...], repo: Path) -> str:
    """A file module by its file, a folder by its folder (`src/control/`)."""
    file = mods[m].file
    if not has_children(mods, m):
        return str(file.relative_to(repo))
    folder = file.parent if file.name == "mod.rs" else file.parent / file.stem
    return str(folder.relative_to(repo)) + "/"


def check(repo: Path) -> list[str]:
    """One line per circle found, naming the files and where each edge is."""
    reports = []
    for root in crate_roots(repo):
        mods = load_crate(root)
        graph = edges(mods)
        for cycle, comp in cycles(graph):
            hops = []
            for a, b in zip(cycle, cycle[1:] + cycle[:1]):
                hops.append(f"{name(mods, a, repo)}:{graph[a][b]}")
            loop = " -> ".join(hops + [name(mods, cycle[0], repo)])
            report = f"import circle in {root.relative_to(repo)}: {loop}"
            if len(comp) > len(cycle):
                report += " (tangled with: " + ", ".join(
                    name(mods, m, repo) for m in comp if m not in cycle) + ")"
            reports.append(report)
        for level in sibling_graphs(mods, graph).values():
            units = {u: set(targets) for u, targets in level.items()}
            for cycle, comp in cycles(units):
                if not any(has_children(mods, u) for u in comp):
                    continue  # single files only: the file check's circle
                loop = " -> ".join(subtree_name(mods, u, repo) for u in cycle + cycle[:1])
                hops = []
                for a, b in zip(cycle, cycle[1:] + cycle[:1]):
                    src, line, dst = level[a][b]
                    hops.append(f"{name(mods, src, repo)}:{line} -> {name(mods, dst, repo)}")
                report = f"import circle between folders in {root.relative_to(repo)}: {loop} ({'; '.join(hops)})"
                if len(comp) > len(cycle):
                    report += " (tangled with: " + ", ".join(
                        subtree_name(mods, u, repo) for u in comp if u not in cycle) + ")"
                reports.append(report)
    return sorted(set(reports))


def self_test() -> None:
    """Planted circles (of files, of folders) are found; what the rule allows is not."""
    files = {
        "Cargo.toml": "[package]\nname = \"planted\"\n",
        "src/lib.rs": (
            "mod a;\nmod b;\nmod folder;\nmod clean;\nmod p;\nmod q;\nmod deep;\nmod tidy;\n"
            "pub use a::A;\n"
        ),
        # a -> b through a use tree, b -> a through an inline path.
        "src/a.rs": "use crate::{clean, b::{self, B as _}};\npub struct A;\n",
        "src/b.rs": "pub struct B;\nfn f() { let _ = crate::a::A; }\n",
        # Parent <-> child is the rule's exception; siblings through super:: count.
        "src/folder/mod.rs": "mod x;\nmod y;\npub use x::X;\npub struct P;\n",
        "src/folder/x.rs": "use super::P;\nuse super::y::Y;\npub struct X;\n",
        "src/folder/y.rs": "pub struct Y;\n#[cfg(test)]\nmod tests { use super::super::x::X; }\n",
        # Comments, strings, and a test module's `super` (its own file) are no edges.
        "src/clean.rs": (
            "// use crate::a::A;\n/* crate::b::B */\nconst S: &str = \"crate::a::A\";\n"
            "const R: &str = r#\"crate::b\"#;\nfn g<'a>(c: char) -> bool { c == '\"' }\n"
            "#[cfg(test)]\nmod tests { use super::*; }\n"
        ),
        # Folders: p/ uses q.rs from a file inside it, q.rs uses p/ through
        # its mod.rs; no two files need each other, the two subtrees do.
        "src/p/mod.rs": "mod inner;\npub struct P;\n",
        "src/p/inner.rs": "use crate::q::Q;\n",
        "src/q.rs": "pub struct Q;\nfn f() { let _ = crate::p::P; }\n",
        # Two folders one level down, one of them an `n.rs` beside `n/`.
        "src/deep/mod.rs": "mod m;\nmod n;\n",
        "src/deep/m/mod.rs": "mod leaf;\npub struct M;\n",
        "src/deep/m/leaf.rs": "use crate::deep::n::N;\n",
        "src/deep/n.rs": "mod sub;\npub struct N;\n",
        "src/deep/n/sub.rs": "use super::super::m::M;\n",
        # A folder using a sibling one way, and its parent and child each other: clean.
        "src/tidy/mod.rs": "mod t;\npub use t::T;\npub struct U;\n",
        "src/tidy/t.rs": "use super::U;\nuse crate::clean;\nuse crate::deep::n::N;\npub struct T;\n",
    }
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        for rel, text in files.items():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(text)
        found = check(repo)
        expected = [
            "import circle between folders in src/lib.rs: src/deep/m/ -> src/deep/n/ -> src/deep/m/"
            " (src/deep/m/leaf.rs:1 -> src/deep/n.rs; src/deep/n/sub.rs:1 -> src/deep/m/mod.rs)",
            "import circle between folders in src/lib.rs: src/p/ -> src/q.rs -> src/p/"
            " (src/p/inner.rs:1 -> src/q.rs; src/q.rs:2 -> src/p/mod.rs)",
            "import circle in src/lib.rs: src/a.rs:1 -> src/b.rs:2 -> src/a.rs",
            "import circle in src/lib.rs: src/folder/x.rs:2 -> src/folder/y.rs:3 -> src/folder/x.rs",
        ]
        assert found == expected, f"self-test: found {found!r}, expected {expected!r}"
        # Break them all: no circle left (p/ -> q.rs and m/ -> n/ stay, one way).
        (repo / "src/b.rs").write_text("pub struct B;\n")
        (repo / "src/folder/y.rs").write_text("pub struct Y;\n")
        (repo / "src/q.rs").write_text("pub struct Q;\n")
        (repo / "src/deep/n/sub.rs").write_text("pub struct S;\n")
        found = check(repo)
        assert found == [], f"self-test: found {found!r} after the circles were broken"
    print("import_cycles self-test: ok")


def main(argv: list[str]) -> int:
    if argv[1:] == ["--self-test"]:
        self_test()
        return 0
    repo = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    found = check(repo.resolve())
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} import circle(s); the rule is in scripts/import_cycles.py's doc", file=sys.stderr)
        return 1
    print("no import circles")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
