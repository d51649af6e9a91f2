"""Every relative link in README.md and docs/ leads somewhere: the file exists and, with an
#anchor, the heading it names exists there (GitHub's heading ids)."""
from __future__ import annotations

import re

from conftest import REPO

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def _prose_lines(text: str):
    """Lines outside fenced code blocks."""
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield line


def github_anchor(heading: str) -> str:
    """GitHub's id for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*|_(?=\W)|(?<=\W)_", "", heading.strip()).lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path) -> set[str]:
    out, seen = set(), {}
    for line in _prose_lines(path.read_text()):
        m = HEADING.match(line)
        if m:
            base = github_anchor(m.group(1))
            n = seen.get(base, 0)
            out.add(base if n == 0 else f"{base}-{n}")
            seen[base] = n + 1
    return out


def broken_links(doc) -> list[str]:
    bad = []
    for line in _prose_lines(doc.read_text()):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (doc.parent / file_part).resolve() if file_part else doc
            if not dest.exists():
                bad.append(f"{doc.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{doc.relative_to(REPO)}: {target} "
                           f"(no heading #{anchor} in {dest.name})")
    return bad


def test_github_anchor_rule():
    assert github_anchor("Configuration reference") == "configuration-reference"
    assert github_anchor("What is where: the data path") == "what-is-where-the-data-path"
    assert github_anchor("`bevpool-bag eval`: replay") == "bevpool-bag-eval-replay"


def test_every_relative_link_in_the_docs_resolves():
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    bad = [b for doc in docs for b in broken_links(doc)]
    assert not bad, "\n".join(bad)
