#!/usr/bin/env python3
"""Checks every relative link in the documentation: the Markdown pages and the crates' rustdoc.

Run from anywhere; it works on the repository root (the parent of .ci/). Files checked:
README.md, CHANGELOG.md, BENCHMARKS.md, bench/HISTORY.md, every *.md under docs/ and examples/
(not under target/, node_modules/ or a venv), the markdown files pulled into rustdoc
(idem-runtime/src/docs/*.md), and the `//!` and `///` comments of idem-runtime, idem-macros,
idem-client and idem-rules (src/**/*.rs).

For each inline link `[text](target)`, image, reference definition `[label]: target` and HTML
`href`/`src` whose target is not a URL (no scheme such as https: or mailto:): the file or folder
must exist, relative to the linking file's folder (or to the repository root for a target that
starts with `/`); and a `#anchor` into a Markdown file (or alone: the same file) must be the
GitHub slug of one of its headings. In doc comments, targets that look like Rust paths (with
`::`, in backticks, or with no `/`, no `.ext` and no `#`) are rustdoc's intra-doc links, which
`cargo doc -D warnings` checks, and are skipped. Links inside fenced code blocks and inline code
spans are ignored.

Broken links are printed as `file:line: target (reason)` and the exit status is 1; otherwise one
summary line, exit status 0. `--self-test` checks the checker on built-in cases.

Standard library only (Python 3.11).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parent.parent

MD_FILES = ["README.md", "CHANGELOG.md", "BENCHMARKS.md", "bench/HISTORY.md"]
MD_TREES = ["docs", "examples"]
RUSTDOC_MD = ["idem-runtime/src/docs"]
CRATES = ["idem-runtime/src", "idem-macros/src", "idem-client/src", "idem-rules/src"]
SKIP_DIRS = {"target", "node_modules", ".git", "__pycache__"}


def skipped_dir(name: str) -> bool:
    return name in SKIP_DIRS or "venv" in name.lower()


@dataclass
class Doc:
    """A Markdown text and, for each of its lines, the line of the file it comes from."""

    path: Path  # the file, absolute
    text: str
    lines: list[int]  # 1-based file line of each text line
    rustdoc: bool = False


@dataclass
class Link:
    doc: Doc
    line: int  # 1-based, in the file
    target: str


# --- Markdown scanning -------------------------------------------------------------------------

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def blank(s: str) -> str:
    """The same length, every character but newlines a space: offsets stay line-accurate."""
    return re.sub(r"[^\n]", " ", s)


def strip_code(text: str) -> str:
    """The text with fenced code blocks and inline code spans blanked out."""
    out = []
    fence = None  # (char, length) of the open fence
    for line in text.split("\n"):
        m = FENCE.match(line)
        if fence is None:
            if m and not (m.group(1)[0] == "`" and "`" in line[m.end():]):
                fence = (m.group(1)[0], len(m.group(1)))
                out.append(blank(line))
            else:
                out.append(line)
        else:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= fence[1] \
                    and line[m.end():].strip() == "":
                fence = None
            out.append(blank(line))
    text = "\n".join(out)
    # Inline code spans: a run of N backticks up to the next run of exactly N backticks, which may
    # be on a later line of the same paragraph (not across a blank line).
    result = []
    i = 0
    opener = re.compile(r"`+")
    while True:
        m = opener.search(text, i)
        if not m:
            result.append(text[i:])
            break
        n = len(m.group(0))
        close = re.compile(r"(?<!`)`{%d}(?!`)" % n)
        c = close.search(text, m.end())
        if c and "\n\n" not in text[m.end():c.start()]:
            result.append(text[i:m.start()])
            result.append(blank(text[m.start():c.end()]))
            i = c.end()
        else:  # an unmatched run is literal backticks
            result.append(text[i:m.end()])
            i = m.end()
    return "".join(result)


def matching(text: str, start: int, open_c: str, close_c: str) -> int:
    """The index of the bracket closing the one at `start`, or -1 (backslash escapes honoured)."""
    depth = 0
    i = start
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == open_c:
            depth += 1
        elif c == close_c:
            depth -= 1
            if depth == 0:
                return i
        elif c == "\n" and open_c == "(" and text[i + 1:i + 2] == "\n":
            return -1
        i += 1
    return -1


REFDEF = re.compile(r"^ {0,3}\[([^\]\n]+)\]:[ \t]*(<[^>\n]*>|\S+)", re.M)
HTML_ATTR = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']*)[\"']", re.I)


def link_targets(text: str, original: str) -> list[tuple[int, str]]:
    """(offset, target) of every link in Markdown `text`, which is `original` with its code
    blanked: links are found in `text`, their targets read from `original` (a target in backticks
    stays visible, so rustdoc's are recognised)."""
    found = []
    for m in REFDEF.finditer(text):
        target = original[m.start(2):m.end(2)]
        if target.startswith("<"):
            target = target[1:-1]
        found.append((m.start(2), target))
    i = 0
    while True:
        i = text.find("[", i)
        if i < 0:
            break
        if i > 0 and text[i - 1] == "\\":
            i += 1
            continue
        end = matching(text, i, "[", "]")
        if end < 0:
            i += 1
            continue
        if end + 1 < len(text) and text[end + 1] == "(":
            close = matching(text, end + 1, "(", ")")
            if close > 0:
                inner = original[end + 2:close].strip()
                if inner.startswith("<"):
                    target = inner[1:inner.find(">")] if ">" in inner else inner[1:]
                else:
                    target = inner.split()[0] if inner.split() else ""
                found.append((end + 2 + (len(original[end + 2:close])
                                         - len(original[end + 2:close].lstrip())), target))
                # Links may nest inside the text only as images: look inside the brackets too.
                i += 1
                continue
        i += 1
    for m in HTML_ATTR.finditer(text):
        found.append((m.start(1), original[m.start(1):m.end(1)]))
    return sorted(found)


ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
HTML_ID = re.compile(r"<[a-zA-Z][^>]*?\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']")


def heading_text(raw: str) -> str:
    """A heading's text as GitHub renders it, before the slug: no code ticks, links, emphasis."""
    s = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)  # links and images: their text
    s = re.sub(r"!?\[([^\]]*)\]\[[^\]]*\]", r"\1", s)
    s = re.sub(r"<[^>]+>", "", s)  # HTML tags
    s = s.replace("`", "")
    s = re.sub(r"(\*+|(?<![A-Za-z0-9])_+|_+(?![A-Za-z0-9]))", "", s)  # emphasis markers
    return s.strip()


def slug(text: str) -> str:
    """GitHub's heading anchor: lowercase, punctuation but `-` and `_` dropped, spaces to `-`."""
    s = heading_text(text).lower()
    s = "".join(c for c in s if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return s.replace(" ", "-")


def anchors(doc: Doc) -> set[str]:
    """Every anchor of a Markdown text: its headings' slugs (duplicates get -1, -2...) and ids."""
    text = strip_code_fences_only(doc.text)
    seen: dict[str, int] = {}
    out = set()

    def add(title: str) -> None:
        base = slug(title)
        if base in seen:
            seen[base] += 1
            name = f"{base}-{seen[base]}"
            while name in seen:  # a heading whose own slug is `x-1` already took it
                seen[base] += 1
                name = f"{base}-{seen[base]}"
            seen[name] = 0
        else:
            seen[base] = 0
            name = base
        out.add(name)

    lines = text.split("\n")
    for n, line in enumerate(lines):
        m = ATX.match(line)
        if m:
            add(m.group(2) or "")
            continue
        s = SETEXT.match(line)
        if s and n > 0 and lines[n - 1].strip() and not ATX.match(lines[n - 1]) \
                and not FENCE.match(lines[n - 1]) \
                and (s.group(1)[0] == "=" or not re.match(r"^\s*([-*+]|\d+[.)])\s", lines[n - 1])) \
                and not lines[n - 1].lstrip().startswith("|"):
            add(lines[n - 1].strip())
    for m in HTML_ID.finditer(strip_code(doc.text)):
        out.add(m.group(1))
    return out


def strip_code_fences_only(text: str) -> str:
    out = []
    fence = None
    for line in text.split("\n"):
        m = FENCE.match(line)
        if fence is None:
            if m and not (m.group(1)[0] == "`" and "`" in line[m.end():]):
                fence = (m.group(1)[0], len(m.group(1)))
                out.append("")
            else:
                out.append(line)
        else:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= fence[1] \
                    and line[m.end():].strip() == "":
                fence = None
            out.append("")
    return "\n".join(out)


# --- Files -------------------------------------------------------------------------------------

def read_markdown(path: Path) -> Doc:
    text = path.read_text(encoding="utf-8")
    return Doc(path, text, list(range(1, text.count("\n") + 2)))


DOC_LINE = re.compile(r"^\s*//(!|/(?!/))(.*)$")


def read_rustdoc(path: Path) -> list[Doc]:
    """The doc comments of a Rust file, one Markdown text per run of `//!` or `///` lines."""
    docs = []
    kind, lines, numbers = None, [], []
    for n, line in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
        m = DOC_LINE.match(line)
        this = m.group(1) if m else None
        if this != kind and lines:
            docs.append(Doc(path, "\n".join(lines), numbers, rustdoc=True))
            lines, numbers = [], []
        kind = this
        if m:
            body = m.group(2)
            lines.append(body[1:] if body.startswith(" ") else body)
            numbers.append(n)
    if lines:
        docs.append(Doc(path, "\n".join(lines), numbers, rustdoc=True))
    return docs


def walk(root: Path, suffix: str) -> list[Path]:
    found = []
    if not root.is_dir():
        return found
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not skipped_dir(d))
        found.extend(Path(folder) / f for f in sorted(files) if f.endswith(suffix))
    return found


def collect(root: Path) -> list[Doc]:
    docs = []
    for name in MD_FILES:
        if (root / name).is_file():
            docs.append(read_markdown(root / name))
    for tree in MD_TREES + RUSTDOC_MD:
        for path in walk(root / tree, ".md"):
            docs.append(read_markdown(path))
    for crate in CRATES:
        for path in walk(root / crate, ".rs"):
            docs.extend(read_rustdoc(path))
    return docs


# --- Checking ----------------------------------------------------------------------------------

SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def is_rust_path(target: str) -> bool:
    if "::" in target or target.startswith("`"):
        return True
    path = target.split("#", 1)[0]
    has_ext = re.search(r"\.[A-Za-z0-9]+$", path) is not None
    return "/" not in target and not has_ext and "#" not in target


def links_of(doc: Doc) -> list[Link]:
    text = strip_code(doc.text)
    out = []
    for offset, target in link_targets(text, doc.text):
        line = doc.lines[min(text.count("\n", 0, offset), len(doc.lines) - 1)]
        out.append(Link(doc, line, target))
    return out


class Checker:
    def __init__(self, root: Path):
        self.root = root
        self._anchors: dict[Path, set[str]] = {}

    def anchors_of(self, path: Path, doc: Doc | None = None) -> set[str]:
        if path not in self._anchors:
            if doc is not None and doc.rustdoc:
                self._anchors[path] = set().union(
                    *(anchors(d) for d in read_rustdoc(path)))
            else:
                self._anchors[path] = anchors(read_markdown(path))
        return self._anchors[path]

    def problem(self, link: Link) -> str | None:
        """Why the link is broken, or None. Links that are not checked never get here."""
        target = link.target
        if not target:
            return "empty target"
        path_part, _, anchor = target.partition("#")
        path_part = path_part.split("?", 1)[0]
        anchor = unquote(anchor)
        if path_part:
            rel = unquote(path_part)
            base = self.root if rel.startswith("/") else link.doc.path.parent
            dest = (base / rel.lstrip("/")).resolve()
            if not dest.exists():
                return "no such file or directory"
            try:
                dest.relative_to(self.root)
            except ValueError:
                return "outside the repository"
            if not anchor:
                return None
            if dest.is_dir() or dest.suffix.lower() not in (".md", ".markdown"):
                return None  # line anchors (#L10) and the like: GitHub's, not checked
            if anchor not in self.anchors_of(dest):
                return f"no heading #{anchor} in {dest.relative_to(self.root)}"
            return None
        if anchor not in self.anchors_of(link.doc.path, link.doc):
            return f"no heading #{anchor} in this file"
        return None

    def wanted(self, link: Link) -> bool:
        t = link.target.strip()
        if SCHEME.match(t) or t.startswith("//"):
            return False  # a URL (or a scheme-relative one)
        if link.doc.rustdoc and is_rust_path(t):
            return False
        return True

    def run(self, docs: list[Doc]) -> tuple[int, list[str]]:
        checked, broken = 0, []
        for doc in docs:
            for link in links_of(doc):
                if not self.wanted(link):
                    continue
                checked += 1
                why = self.problem(link)
                if why:
                    rel = doc.path.relative_to(self.root)
                    broken.append(f"{rel}:{link.line}: {link.target} ({why})")
        return checked, broken


# --- Self-test ---------------------------------------------------------------------------------

SELF_TEST_FILES = {
    "README.md": """# Project

See [the guide](docs/guide.md), [its setup](docs/guide.md#set-up), [a folder](docs),
[the second Usage](docs/guide.md#usage-1), [this file's intro](#intro), and ![a logo](docs/logo.png).
Also [a URL](https://example.com/x.md), [mail](mailto:a@b.c) and [a reference][ref].

## Intro

[missing file](docs/nope.md) and [missing anchor](docs/guide.md#nowhere) and
[wrapped
link](docs/gone.md).

```sh
[inside a fence](docs/not-checked.md)
```

Inline code is not a link: `[x](docs/not-checked-either.md)`; nor this one:
`` [y](docs/nor-this.md) ``.

[ref]: docs/guide.md#step-2-rust--cargo
[bad ref]: ./nope/
""",
    "docs/guide.md": """# Guide

## Set up

## Usage

Text.

## Usage

## Step 2: Rust & `cargo`

Back to [the README](../README.md#intro), [the third usage](#usage-2).
""",
    "docs/logo.png": "",
    "crate/src/lib.rs": """//! Crate docs: [`Thing`](crate::Thing), [Other](Other), [`x`](`y`),
//! [the guide](../../docs/guide.md#usage), [ok](#heading-here) and
//! [broken](../../docs/missing.md).
//!
//! # Heading here
//!
//! ```
//! // [in a doc test](../../docs/not-checked.md)
//! ```

/// An item: [gone](#no-such-heading)
pub struct Thing;
""",
}

SELF_TEST_EXPECTED = [
    "README.md:9: docs/nope.md (no such file or directory)",
    "README.md:9: docs/guide.md#nowhere (no heading #nowhere in docs/guide.md)",
    "README.md:11: docs/gone.md (no such file or directory)",
    "README.md:21: ./nope/ (no such file or directory)",
    "docs/guide.md:13: #usage-2 (no heading #usage-2 in this file)",
    "crate/src/lib.rs:3: ../../docs/missing.md (no such file or directory)",
    "crate/src/lib.rs:11: #no-such-heading (no heading #no-such-heading in this file)",
]


def self_test() -> int:
    failures = []

    def expect(what: str, got, want) -> None:
        if got != want:
            failures.append(f"{what}: got {got!r}, want {want!r}")

    expect("slug", slug("Atomic mode: exactly-once database effects"),
           "atomic-mode-exactly-once-database-effects")
    expect("slug", slug("More of `payments`"), "more-of-payments")
    expect("slug", slug("The programmatic API: work that is not an HTTP handler"),
           "the-programmatic-api-work-that-is-not-an-http-handler")
    expect("slug", slug("1. Deterministic simulation"), "1-deterministic-simulation")
    expect("slug", slug("Step 2: Rust & `cargo`"), "step-2-rust--cargo")
    expect("slug", slug("snake_case [linked](x.md) *name*"), "snake_case-linked-name")

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp).resolve()
        for name, body in SELF_TEST_FILES.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(body, encoding="utf-8")
        docs = [read_markdown(root / "README.md"), read_markdown(root / "docs/guide.md")]
        docs += read_rustdoc(root / "crate/src/lib.rs")
        checked, broken = Checker(root).run(docs)
        expect("broken links", broken, SELF_TEST_EXPECTED)
        # Good: guide, setup, folder, usage-1, intro, logo, ref (README: 7 plus 4 broken);
        # guide.md: 2 (1 broken); lib.rs: 2 good, 2 broken.
        expect("links checked", checked, 7 + 4 + 2 + 4)
    if failures:
        for f in failures:
            print(f"links.py self-test: {f}", file=sys.stderr)
        return 1
    print("links.py self-test: ok")
    return 0


def main(argv: list[str]) -> int:
    if argv[1:] == ["--self-test"]:
        return self_test()
    if argv[1:]:
        print(f"usage: {argv[0]} [--self-test]", file=sys.stderr)
        return 2
    docs = collect(ROOT)
    checked, broken = Checker(ROOT).run(docs)
    for b in broken:
        print(b)
    files = len({d.path for d in docs})
    if broken:
        print(f"links.py: {len(broken)} broken of {checked} relative links in {files} files",
              file=sys.stderr)
        return 1
    print(f"links.py: {checked} relative links checked in {files} files, all resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
