"""losses/README.md's table of built-in losses is generated from the registry and must match it.

After adding a built-in or changing a spec's metadata, regenerate the table with
``python -m tests.test_losses_readme --write``.
"""

from __future__ import annotations

import re
import sys
from importlib.metadata import entry_points
from pathlib import Path

import losses

README = Path(__file__).resolve().parents[1] / "losses" / "README.md"
START = "<!-- builtin-table: start (generated: python -m tests.test_losses_readme --write) -->"
END = "<!-- builtin-table: end -->"
ROW_NAME = re.compile(r"^\| `([A-Za-z_0-9]+)` \|", re.M)


def builtin_names() -> list[str]:
    """Names whose entry point lives in this repository's ``losses`` package (no plugin is imported)."""
    eps = entry_points(group=losses.ENTRY_POINT_GROUP)
    return sorted({ep.name for ep in eps if ep.value.startswith("losses.")})


def data_cell(spec: losses.LossSpec) -> str:
    if spec.generates_own_pairs:
        chosen = "gold answer" if spec.chosen_source == "gold" else "best sample"
        return f"pairs, own samples (chosen = {chosen})"
    if spec.data == "sft":
        return f"sft ({spec.sft_source})"
    return spec.data


def reference_cell(spec: losses.LossSpec) -> str:
    parts = ["yes" if spec.needs_reference else "no"]
    if spec.updates_reference:
        parts.append("updated")
    if spec.needs_full_logits:
        parts.append("full logits")
    if spec.needs_value_model:
        parts.append("value head")
    return ", ".join(parts)


def render_table(specs: list[losses.LossSpec]) -> str:
    """One row per spec, grouped by paradigm (registry order), then by name."""
    rows = ["| name | paradigm | data | reference | paper | what it does |", "|---|---|---|---|---|---|"]
    for s in sorted(specs, key=lambda s: (losses.PARADIGMS.index(s.paradigm), s.name)):
        cells = [f"`{s.name}`", s.paradigm, data_cell(s), reference_cell(s), s.paper, s.description]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows)


def readme_table(text: str) -> str:
    if START not in text or END not in text:
        raise AssertionError(f"{README}: the generated-table markers are missing")
    return text.split(START, 1)[1].split(END, 1)[0].strip()


def test_readme_table_names_are_the_registry_builtins():
    documented = ROW_NAME.findall(readme_table(README.read_text()))
    builtins = builtin_names()
    assert len(builtins) == 52
    missing, extra = sorted(set(builtins) - set(documented)), sorted(set(documented) - set(builtins))
    assert not missing and not extra, f"README table: missing {missing}, not built-ins {extra}"
    assert len(documented) == len(set(documented)), "a loss is listed twice"


def test_readme_table_matches_the_registry_metadata():
    expected = render_table([losses.get(n) for n in builtin_names()])
    assert readme_table(README.read_text()) == expected, (
        "stale table: python -m tests.test_losses_readme --write"
    )


def test_rendered_cells_carry_the_capabilities():
    """The data/reference cells spell out the capability flags the trainer reads."""
    assert data_cell(losses.get("spin")) == "pairs, own samples (chosen = gold answer)"
    assert data_cell(losses.get("online_dpo")) == "pairs, own samples (chosen = best sample)"
    assert data_cell(losses.get("rft")) == "sft (self_play)" and data_cell(losses.get("kto")) == "unpaired"
    assert reference_cell(losses.get("tr_dpo")) == "yes, updated"
    assert reference_cell(losses.get("tdpo")) == "yes, full logits"
    assert reference_cell(losses.get("ppo")) == "no, value head"
    assert "\\|y_w\\|" in render_table([losses.get("rdpo")])  # pipes in a cell are escaped


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.test_losses_readme --write")
    text = README.read_text()
    table = render_table([losses.get(n) for n in builtin_names()])
    head, rest = text.split(START, 1)
    README.write_text(f"{head}{START}\n{table}\n{END}{rest.split(END, 1)[1]}")
    print(f"wrote the table of {len(builtin_names())} built-ins to {README}")
