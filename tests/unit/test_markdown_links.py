"""Every relative link in the repository's Markdown resolves: the file or folder it names exists,
and the anchor it names is a heading of the target document (GitHub's heading slugs).

The documents link into each other a lot (the README's map, the references next to the code,
the figures page); a section renamed or moved must not leave a link pointing at nothing.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Final
from urllib.parse import unquote

import pytest

ROOT: Final = Path(__file__).resolve().parents[2]
#: Folders holding documents; hidden folders (.venv, caches) and downloaded jars are not ours.
DOC_ROOTS: Final = ("sidecar", "dictionaries", "tests", "deploy")
#: An inline link or image: [text](target) or [text](target "title").
LINK: Final = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE: Final = re.compile(r"^\s*(```|~~~)")
HEADING: Final = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_CODE: Final = re.compile(r"`+[^`]*`+")


def markdown_files() -> list[Path]:
    """The repository's Markdown documents: the README and those under the document folders."""
    found = [ROOT / "README.md"]
    for folder in DOC_ROOTS:
        found += sorted(
            path
            for path in (ROOT / folder).rglob("*.md")
            if not any(
                part.startswith(".") or part == "lib" for part in path.parts[len(ROOT.parts) :]
            )
        )
    return found


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a link in a code sample is not a link)."""
    lines: list[str] = []
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: markup dropped, lowercase, punctuation other than
    hyphens and underscores removed, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "")
    text = re.sub(r"(\*+|(?<!\w)_+|_+(?!\w))", "", text)  # emphasis markers, not snake_case
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of `path`, duplicates numbered as GitHub numbers them (-1, -2, ...)."""
    seen: Counter[str] = Counter()
    found: set[str] = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if match is None:
            continue
        base = slug(match.group(2))
        found.add(f"{base}-{seen[base]}" if seen[base] else base)
        seen[base] += 1
    return found


def relative_links(path: Path) -> list[str]:
    """The link targets of `path` that are neither absolute URLs nor e-mail addresses (a link's
    text may run over a line break)."""
    prose = INLINE_CODE.sub("", "\n".join(prose_lines(path.read_text(encoding="utf-8"))))
    return [
        target
        for target in LINK.findall(prose)
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE)
    ]


def broken_links(path: Path) -> list[str]:
    """What is wrong with each relative link of `path`, one line each (none: all resolve)."""
    problems: list[str] = []
    for target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not resolved.exists():
            problems.append(f"{target}: no such file or folder")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{target}: {file_part or path.name} has no heading #{anchor}")
    return problems


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(path: Path) -> None:
    assert broken_links(path) == []


def test_links_into_the_figures_page_name_sections_that_make_figures_keeps() -> None:
    """`make figures` rewrites whole `## ` sections of FIGURES.md: a link to a heading inside
    one would dangle after the next run."""
    figures_page = ROOT / "sidecar" / "bench" / "FIGURES.md"
    sections = {
        slug(match.group(2))
        for line in prose_lines(figures_page.read_text(encoding="utf-8"))
        if (match := HEADING.match(line)) and match.group(1) == "##"
    }
    for path in markdown_files():
        for target in relative_links(path):
            file_part, _, anchor = target.partition("#")
            resolved = (path.parent / file_part).resolve() if file_part else path
            if resolved == figures_page and anchor:
                assert anchor in sections, f"{path.relative_to(ROOT)}: {target}"


def test_the_documents_and_their_links_are_found() -> None:
    files = markdown_files()
    assert ROOT / "README.md" in files
    assert ROOT / "deploy" / "RUNBOOKS.md" in files
    assert all(".venv" not in p.parts for p in files)
    assert relative_links(ROOT / "README.md"), "the README links to the other documents"


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("When to use it, and when not", "when-to-use-it-and-when-not"),
        ("Checking the output: `zdict-sidecar verify`", "checking-the-output-zdict-sidecar-verify"),
        ("Keeping dictionaries fresh inside `run`", "keeping-dictionaries-fresh-inside-run"),
        ("In-process: serializer and producer", "in-process-serializer-and-producer"),
        ("`bench relay`: CPU per record", "bench-relay-cpu-per-record"),
        ("**Bold** and [a link](x.md)", "bold-and-a-link"),
        ("zdict_live_ratio, 2.1 × 3", "zdict_live_ratio-21--3"),
    ],
)
def test_anchors_are_githubs_heading_slugs(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_a_missing_file_and_a_missing_anchor_are_reported(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    (tmp_path / "other.md").write_text("# Other\n\n## A section\n", encoding="utf-8")
    doc.write_text(
        "# Doc\n\n[ok](other.md#a-section) [self](#doc) [gone](nowhere.md) "
        "[no anchor](other.md#no-section) [web](https://example.com/x.md#y) [a link\n"
        "over two lines](other.md#a-section)\n\n"
        "```\n[in code](nowhere.md)\n```\n`[inline](nowhere.md)`\n",
        encoding="utf-8",
    )
    problems = broken_links(doc)
    assert len(problems) == 2
    assert problems[0].startswith("nowhere.md: no such file")
    assert problems[1].startswith("other.md#no-section:")
