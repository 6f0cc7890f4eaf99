"""The docs site is a manual (tutorials, how-to guides, explanation, reference) and, apart from it, a lab
notebook (measurements and study results). A manual page holds no measurement log: no dated entry and
no paragraph that opens "Measured"; what was measured is linked from it, in the notebook."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANUAL = ("Tutorials", "How-to guides", "Explanation", "Reference")
NOTEBOOK = "Lab notebook"
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")


def nav_sections() -> dict[str, list[str]]:
    """The pages of each top-level section of mkdocs.yml's nav (read as text: the file's custom tags)."""
    nav = (ROOT / "mkdocs.yml").read_text().split("\nnav:\n", 1)[1]
    sections: dict[str, list[str]] = {}
    current = None
    for line in nav.splitlines():
        if re.match(r"^\S", line):
            break
        top = re.match(r"^  - ([^:]+):\s*(\S*)$", line)
        if top:
            current = top.group(1)
            sections[current] = [top.group(2)] if top.group(2) else []
            continue
        page = re.search(r"(\S+\.md)\s*$", line)
        if page and current:
            sections[current].append(page.group(1))
    return sections


def test_the_nav_holds_the_four_kinds_of_manual_and_the_notebook():
    sections = nav_sections()
    assert all(s in sections and sections[s] for s in (*MANUAL, NOTEBOOK)), sorted(sections)
    listed = {p for pages in sections.values() for p in pages}
    on_disk = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert on_disk <= listed, sorted(on_disk - listed)  # every page is in one section


def test_no_manual_page_holds_a_measurement_log():
    sections = nav_sections()
    pages = [
        p for s in ("How oxbench works", *MANUAL) for p in sections.get(s, []) if not p.startswith("api/")
    ]
    found = []
    for page in pages:
        for n, line in enumerate((ROOT / "docs" / page).read_text().splitlines(), 1):
            if DATE.search(line) or re.match(r"^\**Measured\b", line.strip()):
                found.append(f"docs/{page}:{n}: {line.strip()[:100]}")
    assert not found, "\n".join(found)
