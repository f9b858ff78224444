#!/usr/bin/env python3
"""Lists the public surface of the library crates, one line a path, from
the HTML `cargo doc` writes (stable rustdoc; Python stdlib only).

    python3 scripts/public_api.py [DOC_DIR] > public-api.txt
    python3 scripts/public_api.py --check public-api.txt [DOC_DIR]

DOC_DIR is `cargo doc --workspace --no-deps`'s output (`target/doc`, or
`$CARGO_TARGET_DIR/doc`). Each crate is walked from its root page through
its public modules. A line is a path and what is there:

    steadfast::Supervisor  struct
    steadfast::Supervisor::builder  pub fn builder<S: Service>(…) -> SupervisorBuilder
    steadfast::control::ControlClient  struct  (re-export of steadfast::control::client::ControlClient)
    steadfast::protocol  (re-export of steadfast_protocol)

an item (with its declaration when it is a function, constant, static or
type alias), a member (field, variant, method, associated item: its
declaration), a trait implementation (`impl Trait for Type`, derives
included; auto, blanket and `StructuralPartialEq` ones left out), or a `pub use` that rustdoc
shows as one. Deprecated items and members end in `(deprecated)`. Hidden
items (`#[doc(hidden)]`) are not public surface and are not listed.
Sorted, so a change of surface is a change of lines in review. `--check`
exits 1 with a diff when the listing differs from FILE.
"""

from __future__ import annotations

import difflib
import html
import os
import re
import sys

# The crates whose surface is listed: every library crate of the workspace.
CRATES = ("steadfast", "steadfast_actors", "steadfast_protocol")

MAIN = re.compile(r'<section id="main-content".*', re.S)
ITEM = re.compile(
    r'<dt(?: class="[^"]*")?><a class="(\w+)" href="([^"]+)" title="\w+ ([\w:]+)">.*?</a>'
    r"(.*?)</dt>",
    re.S,
)
REEXPORT = re.compile(r'<dt id="reexport\.(\w+)"><code>(.*?)</code></dt>', re.S)
TITLE = re.compile(r'title="\w+ ([\w:]+)"')
DECL = re.compile(r'<pre class="rust item-decl"><code>(.*?)</code></pre>', re.S)
MEMBER = re.compile(
    r'<(?:section|span) id="((?:variant|structfield|method|tymethod|associatedtype|'
    r'associatedconstant)\.[\w.]+)"[^>]*>(.*?)</(?:section|span)>',
    re.S,
)
IMPL = re.compile(r'<section id="impl-[^"]*" class="impl">(.*?)</section>', re.S)
TAG = re.compile(r"<[^>]+>")
# The sections of an item's page: its own members come before the first
# of these; trait implementations between the first and the second.
TRAIT_IMPLS = 'id="trait-implementations"'
END_OF_IMPLS = ('id="synthetic-implementations"', 'id="blanket-implementations"')
END_OF_MEMBERS = (TRAIT_IMPLS, *END_OF_IMPLS, 'id="implementors"', 'id="foreign-impls"',
                  'id="dyn-compatibility"')
DECLARED = {"fn", "constant", "static", "type", "macro", "attr", "derive"}


def text(fragment: str) -> str:
    """A piece of rustdoc HTML as the one line of Rust it shows."""
    fragment = re.sub(r'<a href="#[^"]*" class="anchor[^"]*">§</a>', "", fragment)
    fragment = re.sub(r'<a class="src[^"]*"[^>]*>Source</a>', "", fragment)
    line = " ".join(html.unescape(TAG.sub("", fragment.replace("<div", " <div"))).split())
    # rustdoc breaks a long signature into one argument a line.
    return line.replace("( ", "(").replace(", )", ")")


def cut(page: str, markers: tuple[str, ...]) -> str:
    """`page` up to the first of `markers`."""
    ends = [page.find(m) for m in markers if m in page]
    return page[: min(ends)] if ends else page


def deprecated(fragment: str) -> str:
    return "  (deprecated)" if 'class="stab deprecated"' in fragment else ""


def item_lines(path: str, kind: str, file: str, note: str) -> list[str]:
    """An item's line and the lines of its members and implementations."""
    with open(file, encoding="utf-8") as f:
        page = MAIN.search(f.read()).group(0)
    decl = DECL.search(page)
    shown = f"  {text(decl.group(1))}" if kind in DECLARED and decl else ""
    lines = [f"{path}  {kind}{shown}{note}"]
    members = cut(page, END_OF_MEMBERS)
    # A member's deprecation note follows its header, before the next member.
    starts = [m.start() for m in MEMBER.finditer(members)] + [len(members)]
    for m, end in zip(MEMBER.finditer(members), starts[1:]):
        name = m.group(1).split(".", 1)[1].replace(".field.", "::")
        lines.append(f"{path}::{name}  {text(m.group(2))}{deprecated(members[m.end():end])}")
    if TRAIT_IMPLS in page:
        impls = cut(page[page.find(TRAIT_IMPLS):], END_OF_IMPLS)
        impls = (text(m.group(1)) for m in IMPL.finditer(impls))
        # `StructuralPartialEq` comes with every derived `PartialEq`.
        lines += [f"{path}  {i}" for i in impls if " StructuralPartialEq for " not in i]
    return lines


def module_lines(crate_dir: str, rel: str, path: str, seen: set[str]) -> list[str]:
    """Every line of the module whose page is `rel` under `crate_dir`."""
    if rel in seen:
        return []
    seen.add(rel)
    here = os.path.dirname(rel)
    with open(os.path.join(crate_dir, rel), encoding="utf-8") as f:
        page = MAIN.search(f.read()).group(0)
    lines = []
    for name, code in REEXPORT.findall(page):
        target = TITLE.search(code)
        origin = target.group(1) if target else text(code).removeprefix("pub use ").split()[0]
        lines.append(f"{path}::{name}  (re-export of {origin.rstrip(';')}){deprecated(code)}")
    for kind, href, _, rest in ITEM.findall(page):
        target = os.path.normpath(os.path.join(here, href))
        name = href.split("/")[0] if kind == "mod" else href.split(".")[1]
        if kind == "mod":
            lines.append(f"{path}::{name}  mod{deprecated(rest)}")
            lines += module_lines(crate_dir, target, f"{path}::{name}", seen)
        else:
            lines += item_lines(f"{path}::{name}", kind, os.path.join(crate_dir, target),
                                deprecated(rest))
    return lines


def listing(doc_dir: str) -> list[str]:
    lines = []
    for crate in CRATES:
        crate_dir = os.path.join(doc_dir, crate)
        if not os.path.isfile(os.path.join(crate_dir, "index.html")):
            sys.exit(f"{crate_dir}/index.html is missing: run `cargo doc --workspace --no-deps`")
        lines += module_lines(crate_dir, "index.html", crate, set())
    return sorted(set(lines))


def main(args: list[str]) -> int:
    check = None
    if args[:1] == ["--check"]:
        check, args = args[1], args[2:]
    target = os.environ.get("CARGO_TARGET_DIR", "target")
    lines = listing(args[0] if args else os.path.join(target, "doc"))
    if check is None:
        sys.stdout.write("".join(f"{line}\n" for line in lines))
        return 0
    with open(check, encoding="utf-8") as f:
        committed = f.read().splitlines()
    diff = list(difflib.unified_diff(committed, lines, check, "now", lineterm=""))
    if diff:
        print("\n".join(diff))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
