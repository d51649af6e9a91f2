"""bench/results/ holds one current file per benchmark (and card), named <benchmark>_<card>, each
pointed to by the README or docs/; superseded runs and their write-ups are in bench/results/history/,
named by what they measured, the card and the date. Every results file the README and docs/ name
exists, and every row of the README's results table names one."""
from __future__ import annotations

import re

from conftest import REPO

RESULTS = REPO / "bench" / "results"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
POINTER = re.compile(r"bench/results/[\w./*-]*")
# names that mean something only to whoever ran them: work periods, device-call numbers, a day's
# second run by letter
TEAM_WORDS = re.compile(r"session|issue|round\d|call\d|recut|\d{4}-\d\d-\d\d[a-z]\b|_early\b|_b\.", re.IGNORECASE)


def pointers() -> dict[str, list[str]]:
    """Every bench/results path the README and docs/ name -> where."""
    found: dict[str, list[str]] = {}
    for doc in DOCS:
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            for path in POINTER.findall(line):
                found.setdefault(path.rstrip("."), []).append(f"{doc.relative_to(REPO)}:{n}")
    return found


def resolves(path: str) -> bool:
    return any(REPO.glob(path)) if "*" in path else (REPO / path).exists()


def test_every_results_file_named_in_the_docs_exists():
    missing = [f"{where[0]}: {path}" for path, where in pointers().items() if not resolves(path)]
    assert not missing, "named but not there:\n" + "\n".join(missing)


def test_every_current_results_file_is_named_in_the_docs():
    named = set(pointers())
    current = sorted(p for p in RESULTS.iterdir() if p.name != "history")
    assert all(p.is_file() for p in current), "bench/results/ holds files and history/ only"
    unnamed = [p.name for p in current if f"bench/results/{p.name}" not in named]
    assert not unnamed, f"current results no README or docs/ page points to: {unnamed}"


def test_results_are_named_by_what_they_measured():
    entries = [p for p in RESULTS.iterdir()] + [p for p in (RESULTS / "history").iterdir()]
    bad = sorted(str(p.relative_to(RESULTS)) for p in entries if TEAM_WORDS.search(p.name))
    assert not bad, f"names that say when or in which work period, not what was measured: {bad}"


def test_every_results_table_row_names_its_results_file():
    readme = (REPO / "README.md").read_text()
    table = readme.split("\n## Results\n", 1)[1].split("\nWhat limits", 1)[0]
    rows = [ln for ln in table.splitlines() if ln.startswith("| ") and not ln.startswith("| what |")]
    assert len(rows) > 10
    bad = [row[:60] for row in rows
           if not (files := POINTER.findall(row.rsplit(" | ", 1)[-1])) or not all(resolves(f) for f in files)]
    assert not bad, f"rows without an existing results file in their last column: {bad}"
