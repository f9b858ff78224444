#!/usr/bin/env python3
"""Checks that what ARCHITECTURE.md names exists, so the page cannot drift.

    python3 scripts/architecture_claims.py [REPO]    exit 1 on any claim broken
    python3 scripts/architecture_claims.py --self-test

Python stdlib only; reads the sources, builds nothing. Each check below
reports every failure with its line in ARCHITECTURE.md and what is missing.

1. **Every path in backticks exists**, tracked by git
   (`actors/src/root.rs`, `lifecycle/`, `journal_file.rs`). A path is tried
   from the repository's root, from the section's crate (`### \`actors/\``
   is `actors/src/`), and from every folder the same list item or
   paragraph named before it (so `mod.rs` after `control_dir/` is
   `actors/src/control_dir/mod.rs`). Outside the codemap a bare file or
   folder name (`daemon.rs`, `control/`) may be any of that name. A path the page says is *not* there (`not \`src/bin/\``)
   must be absent. Paths that are not the repository's (a daemon's file,
   an HTTP request, the plan beside the repository) are listed in
   `NOT_REPOSITORY_PATHS`, each with its reason.
2. **Every name in backticks exists**, by its kind:
   - `a::b::name` (a test, a function, a module): `name` is defined (`fn`,
     `mod`, a type, a const, a variant) in a file of module `b` (`b.rs`,
     `b/…`, or a file with `mod b { … }`); a `Type::name` in a file that
     has an `impl` of (or defines) `Type`. A trailing `*` is a prefix
     (`probe_*`: a `fn probe_…` exists).
   - `snake_case_name` with an underscore: defined as above anywhere, or a
     module file of that name, or, for what other crates define (a lint,
     a method of a dependency), used in an attribute, a manifest, or
     called (`.name(`), which only compiles if it exists.
   - `CamelCase` and `SCREAMING_CASE`: defined (a type, trait, variant,
     const, static, alias) or imported with `use` (a dependency's type);
     what neither Rust nor a dependency defines (a POSIX name, a pattern)
     is listed in `NOT_DEFINED_HERE` with its reason, and an environment
     variable is found quoted in the sources.
   - a lowercase word (a command, a feature, a module, a marker, a wire
     spelling) or a hyphenated one (a feature, a package): found as a
     word in the sources, manifests or docs. This is the tolerant kind:
     such words are of too many sorts to look each up where it is defined.
   - `name!`: a `macro_rules!` here, or one of std's in `NOT_DEFINED_HERE`.
   - `--flag`: a field or literal of that name in the sources.
   Spans that are syntax (`#[allow]`, `panic = "abort"`, `(st_dev,
   st_ino)`) or commands (`cargo doc`; their first word is checked when it
   is a path) are not names; a name the page says the code does *not* use
   (`not \`protocol::plan\``, under "Where the code differs") is skipped.
3. **The named places are the listed places.** "Process-wide state" names
   every static of `.ci/run`'s allow-list (`statics_allowed`) and no other
   SCREAMING name but an environment variable; every static and
   `thread_local!` file on those lists still exists (a stale entry would
   let a new one in under its name); the `unsafe` invariant names exactly
   the files of `unsafe_allowed`.
4. **The tree is the tree**: the actors drawn under Root are those of
   `actors/src/root.rs`'s module doc, which is the authority.
5. **Quoted values are the values**: "`NAME` (N)" means the const `NAME` is
   N.
6. **Every `== stage` named is a stage of `.ci/run`.**
7. **"Features" names every feature** of every package's manifest.
8. **The module lists of "API boundary" are the code's**: the facade's
   public modules and re-export modules (`src/lib.rs`), the private
   modules of its `control/`, and the crate-private modules of
   steadfast-actors (`actors/src/lib.rs`).
9. **Each actor is a triad** `XActor` / `XState` / `XMsg` in `actors/src/`,
   or the page names its other state type.
10. **One file a command**: each command of the `commands!` registry has
    its file in `protocol/src/control/` and its `Execute` in
    `src/control/execute/`, but `reload`'s and `replace`'s, in the files
    the page says; a line marked `reads` is all in its own file (an
    `impl Reads for`), with no `Execute` of the facade's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

# Paths ARCHITECTURE.md quotes that are not files of the repository.
NOT_REPOSITORY_PATHS = {
    "../shared/DESIGN.md": "the plan, beside the repository, not in it",
    ".steadfast/status": "a daemon's file under its data dir",
    "GET /metrics": "an HTTP request",
    "/": "the file system's root",
    "steadfast-actors/failpoints": "a cargo feature of another package",
}

# Names no file here defines and no `use` imports, with why they are real.
NOT_DEFINED_HERE = {
    "XActor": "the triad's pattern, not a type",
    "XState": "the triad's pattern, not a type",
    "XMsg": "the triad's pattern, not a type",
    "StrictModes": "OpenSSH's option, whose walk fsx/ancestors.rs follows",
    "EMFILE": "POSIX errno",
    "EPIPE": "POSIX errno",
    "SIGKILL": "POSIX signal",
    "SCM_RIGHTS": "POSIX ancillary message",
    "O_CLOEXEC": "POSIX open flag",
    "todo!": "std's macro",
    "unimplemented!": "std's macro",
    "thread_local!": "std's macro",
}

SECTION_ROOTS = {
    "protocol/": ["protocol/src"],
    "actors/": ["actors/src"],
    "src/": ["src"],
    "steadfastctl/": ["steadfastctl/src"],
}

SOURCE_SUFFIXES = (".rs", ".toml", ".md", ".py", ".sh")
PATH_SUFFIX = re.compile(r"\.(rs|md|py|sh|toml|yaml|conf|service)$")
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
QUALIFIED = re.compile(rf"^({IDENT}(?:::{IDENT})*)(\*|!|\(\)|!\(\))?$")
FLAG = re.compile(r"^--[a-z][a-z0-9-]*$")
SKIP_WORDS = {"pub", "pub(crate)", "static", "unsafe", "false", "true", "crate"}
CRATE_SEGMENTS = {"steadfast", "steadfast_actors", "steadfast_protocol", "crate"}


@dataclass
class Span:
    text: str
    line: int
    section: str
    before: str  # its line's text before it
    bases: list[str] = field(default_factory=list)  # folders named earlier in the block


def tracked_files(root: Path) -> set[str]:
    """The files git tracks (what a clean clone has), or, outside a git
    checkout (the self-test's copy), every file but build output."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=True
        ).stdout.decode()
        return {f for f in listed.split("\0") if f and (root / f).exists()}
    except (OSError, subprocess.CalledProcessError):
        files = set()
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d != ".git" and not d.startswith("target")]
            rel = Path(dirpath).relative_to(root)
            files.update((rel / name).as_posix() for name in filenames)
        return files


class Repo:
    """The repository's files, and its Rust sources without comment lines."""

    def __init__(self, root: Path):
        self.root = root
        self.files = tracked_files(root)
        self.dirs = {str(parent) for f in self.files for parent in Path(f).parents if str(parent) != "."}
        self.rust: dict[str, str] = {}
        self.text: dict[str, str] = {}
        for path in sorted(self.files):
            if path == "ARCHITECTURE.md" or not (path.endswith(SOURCE_SUFFIXES) or path == ".ci/run"):
                continue
            try:
                content = (root / path).read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            self.text[path] = content
            if path.endswith(".rs"):
                self.rust[path] = "\n".join(
                    ln for ln in content.splitlines() if not ln.lstrip().startswith("//")
                )

    def index(self) -> Index:
        if not hasattr(self, "_index"):
            self._index = Index(self)
        return self._index

    def exists(self, path: str) -> bool:
        path = path.rstrip("/")
        return path in self.files or path in self.dirs

    def is_dir(self, path: str) -> bool:
        return path.rstrip("/") in self.dirs


DEFINITION = re.compile(
    rf"\b(?:fn|struct|enum|trait|type|union|mod|const|static|macro_rules!)\s+(?:mut\s+)?(?!fn\b)({IDENT})"
    rf"|^\s*([A-Z][A-Za-z0-9_]*)\s*(?:[({{,]|=\s*\d|$)"  # a variant
    rf"|^\s*(?:pub(?:\([^)]*\))?\s+)?({IDENT})\s*:(?!:)"  # a field
    rf"|\bas\s+({IDENT})",  # a re-export under this name
    re.M,
)
INLINE_MOD = re.compile(rf"\bmod\s+({IDENT})\s*\{{")
IMPL = re.compile(rf"\bimpl\b[^{{;]*?\b({IDENT})\s*(?:<[^{{;]*)?\{{|\b(?:struct|enum|trait)\s+({IDENT})")
# What only compiles if a dependency defines it: a method or path through
# the name, an import, an attribute.
EXTERNAL = re.compile(rf"(?:\.|::)({IDENT})(?=\s*(?:\(|::))|#!?\[([^\]]*)\]")
USE = re.compile(r"\buse\s([^;]*);")


class Index:
    """What each Rust file defines, and what the code uses from elsewhere."""

    def __init__(self, repo: Repo):
        self.repo = repo
        self.defs: dict[str, set[str]] = {}
        self.types: dict[str, set[str]] = {}
        self.inline_mods: dict[str, set[str]] = {}
        self.external: set[str] = set()
        for path, src in repo.rust.items():
            self.defs[path] = {next(g for g in m.groups() if g) for m in DEFINITION.finditer(src)}
            self.types[path] = {next(g for g in m.groups() if g) for m in IMPL.finditer(src)}
            self.inline_mods[path] = set(INLINE_MOD.findall(src))
            for m in EXTERNAL.finditer(src):
                self.external.update(re.findall(IDENT, m.group(1) or m.group(2)))
            for m in USE.finditer(src):
                self.external.update(re.findall(IDENT, m.group(1)))
        for path, text in repo.text.items():
            if path.endswith("Cargo.toml"):
                self.external.update(re.findall(rf"^\s*({IDENT})\s*=", text, re.M))
        self.all_defs = set().union(*self.defs.values())
        # Literal consts (`const NAME: T = 3;`) and quoted SCREAMING words
        # (an environment variable's name).
        self.consts: dict[str, list[str]] = {}
        self.quoted: set[str] = set()
        for text in repo.text.values():
            self.quoted.update(re.findall(r'"([A-Z][A-Z0-9_]+)"', text))
        for src in repo.rust.values():
            for name, value in re.findall(rf"\bconst\s+({IDENT})\s*:[^=;]+=\s*([0-9_]+)\s*;", src):
                self.consts.setdefault(name, []).append(value.replace("_", ""))
        self.words = set()
        for text in repo.text.values():
            self.words.update(re.findall(r"[A-Za-z0-9_][A-Za-z0-9_-]*", text))
            self.words.update(re.findall(r"[A-Za-z0-9_]+", text))

    def module_files(self, module: str) -> list[str]:
        """The Rust files of module `module`: `module.rs`, under `module/`,
        or holding an inline `mod module { … }`."""
        out = []
        for path in self.repo.rust:
            parts = path.split("/")
            if parts[-1] == f"{module}.rs" or module in parts[:-1] or module in self.inline_mods[path]:
                out.append(path)
        return out

    def type_files(self, ty: str) -> list[str]:
        """Files that define or implement `ty`."""
        return [p for p, types in self.types.items() if ty in types]

    def defined(self, name: str, files: list[str] | None = None, prefix: bool = False) -> bool:
        sets = [self.defs[f] for f in files] if files is not None else [self.all_defs]
        if prefix:
            return any(d.startswith(name) for s in sets for d in s)
        return any(name in s for s in sets)


def parse(doc: str) -> list[Span]:
    """The backticked spans outside fenced blocks, with their section, the
    text before them on their line and the folders named earlier in their
    list item or paragraph."""
    spans: list[Span] = []
    section = ""
    fenced = False
    block: list[str] = []
    for lineno, line in enumerate(doc.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        if line.startswith("#"):
            section = line.lstrip("#").strip()
            block = []
            continue
        if not line.strip() or line.startswith("- ") or line.startswith("|"):
            block = []
        for m in re.finditer(r"`([^`]+)`", line):
            text = m.group(1)
            spans.append(Span(text, lineno, section, line[: m.start()], list(block)))
            if "/" in text or text.endswith(".rs"):
                block.append(text)
    return spans


def path_like(text: str) -> bool:
    if " " in text or "::" in text or text.startswith(("#", "-")):
        return False
    return "/" in text or bool(PATH_SUFFIX.search(text))


def section_roots(section: str) -> list[str] | None:
    for key, roots in SECTION_ROOTS.items():
        if section.startswith(f"`{key}`"):
            return roots
    return None


def resolve(repo: Repo, span: Span, text: str, bases: list[str]) -> str | None:
    """The repository path `text` names, or None."""
    roots = section_roots(span.section)
    candidates = [text]
    for base in (roots or []) + bases:
        candidates.append(f"{base}/{text}")
    for c in candidates:
        if repo.exists(c):
            return c.rstrip("/")
    if roots is None and "/" not in text.rstrip("/"):
        # Outside the codemap a bare file or folder name is any of that name.
        name = text.rstrip("/")
        return next((f for f in sorted(repo.files | repo.dirs) if f.endswith(f"/{name}")), None)
    return None


def check_paths(repo: Repo, spans: list[Span]) -> list[str]:
    errors = []
    # Each path as last resolved: a block's earlier folders, for its later paths.
    resolved: dict[str, str] = {}
    for span in spans:
        text = span.text
        if " " in text and not text.startswith("GET "):
            first = text.split()[0]
            if not path_like(first):
                continue
            text = first
        if text in NOT_REPOSITORY_PATHS or not path_like(text):
            continue
        bases = []
        for earlier in span.bases:
            r = resolved.get(earlier)
            if r is not None:
                bases.append(r if repo.is_dir(r) else str(Path(r).parent))
        where = resolve(repo, span, text, bases)
        negated = span.section.startswith("Where the code differs") and span.before.rstrip().endswith("not")
        if negated:
            if where is not None:
                errors.append(f"line {span.line}: `{text}` is said not to be there, but {where} is")
            continue
        if where is None:
            tried = "the root" + (f", {', '.join(section_roots(span.section) or [])}" if section_roots(span.section) else "")
            errors.append(
                f"line {span.line}: no tracked file or folder `{text}` (tried from {tried} and the folders named before it)"
            )
        else:
            resolved[span.text] = where
    return errors


def check_name(ix: Index, text: str) -> str | None:
    """None if the name exists, else why not."""
    if text in NOT_DEFINED_HERE:
        return None
    if re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)+", text):  # a feature, a package
        return None if text in ix.words else f"the word {text} is nowhere in the sources"
    m = QUALIFIED.match(text)
    if not m:
        return None  # syntax or a command: not a name
    name, suffix = m.group(1), m.group(2) or ""
    prefix = suffix == "*"
    if suffix in ("!", "!()"):
        if name + "!" in NOT_DEFINED_HERE or any(f"macro_rules! {name}" in src for src in ix.repo.rust.values()):
            return None
        return f"no macro_rules! {name}"
    segments = [s for s in name.split("::") if s not in CRATE_SEGMENTS]
    if not segments:
        return None
    if len(segments) > 1:
        *path, last = segments
        owner = path[-1]
        if owner[0].isupper():
            files = ix.type_files(owner)
            if not files:
                return f"no type {owner}"
        else:
            files = ix.module_files(owner)
            if not files:
                return f"no module {owner}"
        if ix.defined(last, files, prefix) or any(Path(f).stem == last for f in files):
            return None
        if owner[0].isupper() and last in ix.external:
            return None
        return f"{last} is not defined in {owner}"
    last = segments[0]
    if last[0].isupper():
        if ix.defined(last, prefix=prefix) or last in ix.external:
            return None
        if last.isupper() and last in ix.quoted:
            return None  # an environment variable
        return f"nothing defines or imports {last}"
    if "_" in last or prefix:
        if ix.defined(last, prefix=prefix) or last in ix.external:
            return None
        if any(Path(p).stem == last for p in ix.repo.rust):
            return None
        return f"nothing defines {last}"
    if last in ix.words:
        return None
    return f"the word {last} is nowhere in the sources"


def check_names(repo: Repo, spans: list[Span]) -> list[str]:
    ix = repo.index()
    errors = []
    for span in spans:
        text = span.text
        if path_like(text) or text in NOT_REPOSITORY_PATHS or text in SKIP_WORDS:
            continue
        if span.section.startswith("Where the code differs") and span.before.rstrip().endswith("not"):
            continue  # the plan's name, which the code does not use
        if FLAG.match(text):
            if text[2:].replace("-", "_") not in ix.words and text[2:] not in ix.words:
                errors.append(f"line {span.line}: no flag `{text}` in the sources")
            continue
        text = re.sub(r"<[^>]*>$", "", text)  # `Execute<C>`: the type
        text = re.sub(r"\(\.\.\)\..*$", "", text)  # `X::builder(..).build()`: the path
        why = check_name(ix, text)
        if why:
            errors.append(f"line {span.line}: `{span.text}`: {why}")
    return errors


def ci_list(ci: str, var: str) -> list[str]:
    m = re.search(rf'^{var}="([^"]*)"', ci, re.M)
    if not m:
        raise SystemExit(f".ci/run has no {var}=\"…\" list")
    return [ln.strip() for ln in m.group(1).splitlines() if ln.strip()]


def section_text(doc: str, heading: str) -> tuple[int, str]:
    lines = doc.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("#") and line.lstrip("#").strip() == heading:
            j = i + 1
            while j < len(lines) and not lines[j].startswith("#"):
                j += 1
            return i + 1, "\n".join(lines[i + 1 : j])
    raise SystemExit(f"ARCHITECTURE.md has no section {heading!r}")


def check_named_places(repo: Repo, doc: str) -> list[str]:
    errors = []
    ci = repo.text[".ci/run"]
    statics = [tuple(entry.split()) for entry in ci_list(ci, "statics_allowed")]
    line, state = section_text(doc, "Process-wide state")
    quoted = repo.index().quoted
    listed = {name for _, name in statics}
    named = {n for n in re.findall(r"`([A-Z][A-Z0-9_]+)`", state) if n in listed or n not in quoted}
    for name in sorted(listed - named):
        errors.append(f"\"Process-wide state\" (line {line}) does not name `{name}`, a static on .ci/run's list")
    for name in sorted(named - listed):
        errors.append(f"\"Process-wide state\" (line {line}) names `{name}`, which is not on .ci/run's list of statics")
    for path, name in statics:
        src = repo.rust.get(path, "")
        if not re.search(rf"\bstatic\s+(?:mut\s+)?{name}\s*:", src):
            errors.append(f".ci/run's statics_allowed lists {path} {name}, which is not there")
    for path in ci_list(ci, "thread_locals_allowed"):
        if "thread_local!" not in repo.rust.get(path, ""):
            errors.append(f".ci/run's thread_locals_allowed lists {path}, which has no thread_local!")
    inv_line, invariants = section_text(doc, "Invariants")
    para = next((p for p in invariants.split("\n- ") if p.startswith("**No `unsafe`")), None)
    if para is None:
        errors.append(f"\"Invariants\" (line {inv_line}) has no item starting **No `unsafe`")
    else:
        quoted = {t for t in re.findall(r"`([^`]+\.rs)`", para)}
        allowed = set(ci_list(ci, "unsafe_allowed"))
        for p in sorted(allowed - quoted):
            errors.append(f"the `unsafe` invariant does not name {p}, on .ci/run's unsafe_allowed")
        for p in sorted(quoted - allowed):
            errors.append(f"the `unsafe` invariant names {p}, not on .ci/run's unsafe_allowed")
    return errors


def tree_children(text: str) -> list[str]:
    """The actors drawn directly under Root in the first fenced tree."""
    m = re.search(r"```(?:text)?\n(Root[^\n]*\n(?:[│├└ ].*\n)+)", text)
    if not m:
        return []
    return re.findall(r"^[├└]── (\w+)", m.group(1), re.M)


def check_tree(repo: Repo, doc: str) -> list[str]:
    root_doc = "\n".join(
        ln.removeprefix("//!").removeprefix(" ") for ln in repo.text["actors/src/root.rs"].splitlines() if ln.startswith("//!")
    )
    ours, theirs = tree_children(doc), tree_children(root_doc)
    if not ours or not theirs:
        return ["the tree under Root is not drawn in ARCHITECTURE.md or actors/src/root.rs"]
    if ours != theirs:
        return [f"the tree under Root: ARCHITECTURE.md draws {ours}, actors/src/root.rs {theirs}"]
    return []


def check_values(repo: Repo, doc: str) -> list[str]:
    errors = []
    for lineno, line in enumerate(doc.splitlines(), 1):
        for m in re.finditer(r"`([A-Z][A-Z0-9_]+)` \((\d+)\)", line):
            name, value = m.groups()
            found = repo.index().consts.get(name, [])
            if value not in found:
                errors.append(f"line {lineno}: `{name}` ({value}), but the const is {found or 'not a literal'}")
    return errors


def check_stages(repo: Repo, doc: str) -> list[str]:
    """Every `== stage` the page names is a stage of .ci/run."""
    stages = set(re.findall(r'^echo "(== [^"]+)"', repo.text[".ci/run"], re.M))
    errors = []
    for lineno, line in enumerate(doc.splitlines(), 1):
        for name in re.findall(r"`(== [^`]+)`", line):
            if name not in stages:
                errors.append(f"line {lineno}: `{name}` is not a stage of .ci/run (its stages: {sorted(stages)})")
    return errors


def manifest_features(text: str) -> list[str]:
    m = re.search(r"^\[features\]\n(.*?)(?=^\[|\Z)", text, re.M | re.S)
    if not m:
        return []
    return [f for f in re.findall(r"^([A-Za-z0-9_-]+)\s*=", m.group(1), re.M) if f != "default"]


def check_features(repo: Repo, doc: str) -> list[str]:
    """The "Features" item names every feature of every package."""
    m = re.search(r"^- \*\*Features\*\*:(.*?)(?=^- |^#|\Z)", doc, re.M | re.S)
    if not m:
        return ["no item **Features** under \"API boundary\""]
    item = m.group(1)
    errors = []
    for manifest, package in (
        ("Cargo.toml", "steadfast"),
        ("actors/Cargo.toml", "steadfast-actors"),
        ("protocol/Cargo.toml", "steadfast-protocol"),
        ("steadfastctl/Cargo.toml", "steadfastctl"),
    ):
        features = manifest_features(repo.text.get(manifest, ""))
        # The package's part of the item: from `package`: to the next package.
        part = re.search(rf"`{re.escape(package)}`:(.*?)(?=`steadfast[a-z-]*`:|Profiles:|\Z)", item, re.S)
        if features and not part:
            errors.append(f"**Features** does not name {package}, whose features are {features}")
            continue
        for f in features:
            if f"`{f}`" not in part.group(1):
                errors.append(f"**Features** does not name {package}'s feature `{f}` ({manifest})")
    return errors


def declared_modules(src: str, visibility: str) -> set[str]:
    """The `mod x;` of a file with this visibility: "pub", "pub(crate)" or
    "" (private)."""
    out = set()
    for vis, name in re.findall(rf"^(pub(?:\(crate\))? )?mod ({IDENT});", src, re.M):
        if vis.strip() == visibility:
            out.add(name)
    return out


def check_boundary(repo: Repo, doc: str) -> list[str]:
    """The module lists of "API boundary" are the crates' modules."""
    _, api = section_text(doc, "API boundary")
    errors = []

    def listed(pattern: str) -> set[str] | None:
        m = re.search(pattern, api, re.S)
        # What is in parentheses qualifies a name (`serve` (under `hyper`)).
        return None if m is None else set(re.findall(r"`([a-z_]+)`", re.sub(r"\([^)]*\)", "", m.group(1))))

    checks = [
        (
            "the facade's modules",
            r"what embedders use:(.*?)the\s+re-export modules",
            declared_modules(repo.rust["src/lib.rs"], "pub"),
        ),
        (
            "the facade's re-export modules",
            r"re-export modules(.*?), and at",
            set(re.findall(rf"^pub mod ({IDENT}) {{", repo.rust["src/lib.rs"], re.M))
            | set(re.findall(rf"^pub use \w+ as ({IDENT});", repo.rust["src/lib.rs"], re.M)),
        ),
        (
            "the private modules of the facade's `control/`",
            r"In `control/`,(.*?)are private",
            declared_modules(repo.rust["src/control/mod.rs"], "")
            | declared_modules(repo.rust["src/control/mod.rs"], "pub(crate)"),
        ),
        (
            "steadfast-actors' crate-private modules",
            r"uses;(.*?)are `pub\(crate\)`",
            declared_modules(repo.rust["actors/src/lib.rs"], "pub(crate)"),
        ),
    ]
    for what, pattern, actual in checks:
        named = listed(pattern)
        if named is None:
            errors.append(f'"API boundary" no longer lists {what} (pattern {pattern!r})')
            continue
        if named != actual:
            errors.append(
                f'"API boundary" lists {what} as {sorted(named)}, the code has {sorted(actual)}'
            )
    return errors


def check_triads(repo: Repo, doc: str) -> list[str]:
    """Each actor of actors/src is a triad XActor / XState / XMsg, but the
    exceptions the page names."""
    errors = []
    impl = re.compile(rf"impl Actor for ({IDENT})Actor \{{\s*type Msg = ({IDENT});\s*type State = ({IDENT});")
    for path, src in sorted(repo.rust.items()):
        if not path.startswith("actors/src/") or "test" in Path(path).name:
            continue
        for x, msg, state in impl.findall(src):
            if msg != f"{x}Msg":
                errors.append(f"{path}: {x}Actor's messages are {msg}, not {x}Msg")
            if state != f"{x}State" and f"`{state}`" not in doc:
                errors.append(f"{path}: {x}Actor's state is {state}, not {x}State, and ARCHITECTURE.md does not say so")
    return errors


def check_commands(repo: Repo, doc: str) -> list[str]:
    """"One file a command": each command of the registry has its file in
    protocol/src/control/ and its `Execute` in src/control/execute/, but
    those the page places elsewhere."""
    registry = re.search(r"^commands! \{\n(.*?)^\}", repo.rust["protocol/src/control/mod.rs"], re.M | re.S)
    if not registry:
        return ["protocol/src/control/mod.rs has no `commands! { … }` registry"]
    errors = []
    elsewhere = {"reload": "src/daemon.rs", "replace": "src/replace.rs"}
    line = rf"^\s*({IDENT}) => ({IDENT})\s*(?:\{{\}}|\([^)]*\))\s*(reads)?\s*,"
    for file, variant, reads in re.findall(line, registry.group(1), re.M):
        if f"protocol/src/control/{file}.rs" not in repo.files:
            errors.append(f"command {file}: no protocol/src/control/{file}.rs")
        if reads:
            if f"impl Reads for {variant} " not in repo.rust.get(f"protocol/src/control/{file}.rs", ""):
                errors.append(f"command {file}: marked `reads`, its file has no `impl Reads for {variant}`")
            if f"src/control/execute/{file}.rs" in repo.files:
                errors.append(f"command {file}: marked `reads`, yet src/control/execute/{file}.rs is there")
            continue
        where = elsewhere.get(file, f"src/control/execute/{file}.rs")
        if f"impl Execute<cmd::{variant}> for ControlService" not in repo.rust.get(where, ""):
            errors.append(f"command {file}: its `Execute<cmd::{variant}>` is not in {where}")
    for file, where in elsewhere.items():
        if not re.search(rf"`{file}`'s (?:is )?in\s+`{Path(where).name}`", doc):
            errors.append(f"the page no longer says `{file}`'s `Execute` is in {where}; update ELSEWHERE here")
    return errors


def check(repo: Repo, doc: str) -> list[str]:
    spans = parse(doc)
    return (
        check_paths(repo, spans)
        + check_names(repo, spans)
        + check_named_places(repo, doc)
        + check_tree(repo, doc)
        + check_values(repo, doc)
        + check_stages(repo, doc)
        + check_features(repo, doc)
        + check_boundary(repo, doc)
        + check_triads(repo, doc)
        + check_commands(repo, doc)
    )


def self_test(root: Path) -> None:
    """Plants one broken claim of each kind into the real page and checks
    each is reported (and that the page as it is passes)."""
    doc = (root / "ARCHITECTURE.md").read_text(encoding="utf-8")
    repo = Repo(root)
    errors = check(repo, doc)
    assert errors == [], f"ARCHITECTURE.md itself must pass before the self-test: {errors}"
    planted = {
        "a missing path": ("`actors/src/root.rs`", "`actors/src/rooot.rs`", "rooot.rs"),
        "a missing file in a folder": ("`journal_file.rs`", "`journal_fyle.rs`", "journal_fyle.rs"),
        "a missing test": (
            "`crash::a_child_process_never_inherits_the_lock`",
            "`crash::a_child_process_never_inherits_the_lockk`",
            "a_child_process_never_inherits_the_lockk",
        ),
        "a test in the wrong module": (
            "`crash::a_child_process_never_inherits_the_lock`",
            "`files::a_child_process_never_inherits_the_lock`",
            "files::a_child_process_never_inherits_the_lock",
        ),
        "a missing type": ("`ReplaceDriver`", "`ReplaceDrivr`", "ReplaceDrivr"),
        "a static left out": ("(`daemon.rs` `CAUGHT`)", "(`daemon.rs` `CAUGHTT`)", "does not name `CAUGHT`"),
        "a wrong value": ("`RESTARTS` (3)", "`RESTARTS` (4)", "`RESTARTS` (4)"),
        "a tree that differs": ("└── Replacement", "└── Replacer", "the tree under Root"),
        "a path that is said not to be there": ("not `src/bin/`", "not `src/`", "said not to be there"),
        "a stage .ci/run does not have": ("`== absences` is its", "`== absencess` is its", "is not a stage"),
        "a feature left out": ("`planted-defects` (`planted.rs`)", "`planted` (`planted.rs`)", "feature `planted-defects`"),
        "a module list that differs": ("`boot`, `drain`, `journal`,", "`boot`, `journal`,", "crate-private modules"),
        "a triad's exception unsaid": ("`LifecycleActorState`", "`LifecycleActorStat`", "does not say so"),
        "an unsafe file that is not on the list": (
            "`protocol/tests/it/journal_framing.rs`: the lint",
            "`protocol/tests/it/journal_resume.rs`: the lint",
            "not on .ci/run's unsafe_allowed",
        ),
        "a command's Execute placed wrong": ("`replace`'s in `replace.rs`", "`replace`'s in `daemon.rs`", "`replace`'s `Execute`"),
    }
    for what, (old, new, expect) in planted.items():
        assert old in doc, f"self-test: {old!r} is no longer in ARCHITECTURE.md; plant another"
        errors = check(repo, doc.replace(old, new, 1))
        assert any(expect in e for e in errors), f"self-test: {what} was not reported: {errors}"
    with tempfile.TemporaryDirectory() as tmp:
        # A stale allow-list entry: a static .ci/run lists that the code lost.
        t = Path(tmp)
        for path in ("actors/src/root.rs", ".ci/run"):
            (t / path).parent.mkdir(parents=True, exist_ok=True)
            (t / path).write_text((root / path).read_text(encoding="utf-8"), encoding="utf-8")
        errors = check_named_places(Repo(t), doc)
        assert any("which is not there" in e for e in errors), f"self-test: a stale static was not reported: {errors}"
    print(f"self-test: {len(planted) + 1} planted breaks, each reported")


def main(argv: list[str]) -> int:
    args = [a for a in argv if a != "--self-test"]
    root = Path(args[0]) if args else Path(__file__).resolve().parent.parent
    if "--self-test" in argv:
        self_test(root)
        return 0
    doc = (root / "ARCHITECTURE.md").read_text(encoding="utf-8")
    errors = check(Repo(root), doc)
    for e in errors:
        print(f"ARCHITECTURE.md: {e}", file=sys.stderr)
    if errors:
        print(f"{len(errors)} claim(s) of ARCHITECTURE.md do not hold (scripts/architecture_claims.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
