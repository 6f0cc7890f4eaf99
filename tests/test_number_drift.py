"""Numbers in the docs and results/README.md come from committed scripts, and stay what those scripts
say (issue 40, item 8): each quoted table is regenerated here, from the committed records or the
committed benchmark results, by the script that made it, and must equal the page, character for
character. A quoted number that drifts from its script fails here.

The oxrl_skill section's numbers come from commands whose outputs are committed under
``results/oxrl_skill_analysis/``: each output is regenerated and must be its file, the two-leaderboard
tables (``analysis.leaderboard_agreement``) must be on the page character for character, and each row
of the section's other tables must give, in order, the numbers of one output row, each rounded to the
digits the page shows.

The sections in SECTIONS (below) are checked the same way: every committed ``$ python -m`` output under
``results/*_analysis/`` is regenerated, every directory a section's ``--out`` command writes is
rewritten and compared byte for byte, and each table row and quoted confidence interval of the
section must be one of its commands' outputs', as must every p value, percentage and "mean ± SD" of its prose (and
of the oxrl_skill sections'). UNSCRIPTED lists the tables no script prints, HISTORICAL the withdrawn
first-analysis p values the prose quotes as history."""

from __future__ import annotations

import bisect
import contextlib
import csv
import importlib
import importlib.util
import io
import json
import re
import subprocess
import sys
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _benchmark(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _page(path: str) -> str:
    return (ROOT / path).read_text(encoding="utf-8")


@pytest.mark.parametrize("seeds", [(3, 5), (2,)])
def test_the_two_way_validation_tables_are_the_benchmarks(seeds):
    rows = json.loads((ROOT / "benchmarks/results/twoway_coverage.json").read_text())["rows"]
    assert _benchmark("twoway_coverage").markdown(rows, seeds) in _page("docs/twoway_validation.md")


def test_the_sample_stream_table_is_the_benchmarks():
    rows = json.loads((ROOT / "benchmarks/results/sample_stream.json").read_text())["rows"]
    assert _benchmark("sample_stream").markdown(rows) in _page("docs/measurements.md")


def _regenerated(module: str, tmp_path: Path, *args: str) -> str:
    """The README ``python -m analysis.<module>`` writes from the committed records, into ``tmp_path``."""
    cmd = [sys.executable, "-m", f"analysis.{module}", *args, "--out", str(tmp_path)]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return (tmp_path / "README.md").read_text(encoding="utf-8")


def test_the_staleness_model_is_what_its_records_give(tmp_path):
    committed = ROOT / "results/staleness_model/README.md"
    if not committed.exists():
        pytest.fail("results/staleness_model/README.md: run python -m analysis.staleness_model results")
    assert _regenerated("staleness_model", tmp_path, "results") == committed.read_text(encoding="utf-8")


# -- the oxrl_skill section of results/README.md (issue 40, item 8) ------------------------------------------
# Every command that section names is run, its output committed under results/oxrl_skill_analysis/ (each
# file's first line "$ <command>", the rest what it printed): the outputs are regenerated here and must be
# the committed files; the section's tables must quote them (the two-leaderboard tables verbatim, every
# other table number by number, each number the output's rounded to the digits the page shows).

RESULTS = ROOT / "results"


def _is_output(path: Path) -> bool:
    """``path`` holds what a command printed: its first line is ``$ python -m <command>``."""
    with path.open(encoding="utf-8") as f:
        return f.readline().startswith("$ python -m ")


#: every committed command output, as a path under results/ ("oxrl_skill_analysis/oxrl_skill.txt")
OUTPUTS = sorted(
    str(p.relative_to(RESULTS))
    for p in RESULTS.glob("*_analysis/*")
    if p.suffix in (".txt", ".md") and _is_output(p)
)
SKILL_OUTPUTS = [n for n in OUTPUTS if n.startswith("oxrl_skill_analysis/")]
NUMBER = re.compile(r"[+\-−]?\d+(?:\.\d+)?(?:e[+\-−]?\d+)?")
#: README columns whose numbers are the arm's under another metric (the same command with --metric)
METRIC_COLUMNS = {"strict": "accuracy", "flexible": "accuracy_flexible"}
#: README columns the recipe gives, not a script (the optimizer steps of an arm)
RECIPE_COLUMNS = {"steps"}


def _printed(argv: list[str]) -> str:
    """What ``python -m <argv>`` prints, run in this process (one import of the analyses for all)."""
    module = importlib.import_module(argv[0])
    out = io.StringIO()
    with mock.patch.object(sys, "argv", argv), contextlib.redirect_stdout(out):
        module.main()
    return out.getvalue()


def _committed(name: str) -> tuple[list[str], str]:
    """A committed output (a path under results/): its command's argv after ``python -m``, and what
    the command printed."""
    head, _, body = (RESULTS / name).read_text(encoding="utf-8").partition("\n")
    assert head.startswith("$ python -m "), f"{name}: the first line is not '$ python -m <command>'"
    return head.split()[3:], body


@pytest.mark.parametrize("name", OUTPUTS)
def test_the_committed_outputs_are_what_the_scripts_print(name):
    argv, body = _committed(name)
    assert _printed(argv) == body, f"results/{name}: rerun '{' '.join(argv)}'"


def _tables(text: str) -> list[list[str]]:
    """The markdown tables of ``text`` (its lines, indentation stripped), each a list of lines."""
    tables, rows = [], []
    for line in [*text.splitlines(), ""]:
        if line.strip().startswith("|"):
            rows.append(line.strip())
        elif rows:
            tables, rows = [*tables, rows], []
    return tables


def test_the_two_leaderboards_are_what_leaderboard_agreement_prints():
    """The merged leaderboards and the ρ table, regenerated from the records, are in results/README.md
    character for character; every "Spearman ρ" quoted in it or in docs/ is the merged ρ (of these two
    grids, or of another pair's committed leaderboard_agreement output)."""
    printed = _printed(["analysis.leaderboard_agreement", "results/oxrl_skill", "results/oxrl_core"])
    merged, *_, rho = _tables(printed)
    page = "\n".join(line.strip() for line in _page("results/README.md").splitlines())
    assert "\n".join(merged) in page and "\n".join(rho) in page
    assert "`python -m analysis.leaderboard_agreement results/oxrl_skill results/oxrl_core`" in " ".join(
        page.split()
    )
    primary = {row.split(" | ")[2] for row in rho[2:] if row.startswith("| verified-flexible |")}
    for name in OUTPUTS:  # another pair of grids' merged ρ (countdown_core's), from its committed output
        argv, body = _committed(name)
        if argv[0] == "analysis.leaderboard_agreement" and argv[1:3] != [
            "results/oxrl_skill",
            "results/oxrl_core",
        ]:
            primary |= {row.split(" | ")[2] for row in _tables(body)[-1][2:]}
    pages = ["results/README.md", *(str(p.relative_to(ROOT)) for p in sorted((ROOT / "docs").glob("*.md")))]
    quoted = {
        (p, v) for p in pages for v in re.findall(r"Spearman ρ =? ?(\d\.\d+)", " ".join(_page(p).split()))
    }
    assert quoted and {(p, v) for p, v in quoted if v not in primary} == set()


def _shown(quoted: str, printed: str) -> bool:
    """``quoted`` is ``printed`` rounded to the digits ``quoted`` shows ("4e-5" of "4.3e-05", "+3.5" of
    "+3.47"; half up or half even, the page's rounding of a rounded number)."""
    q, x = (Decimal(s.replace("−", "-")) for s in (quoted, printed))
    step = Decimal(1).scaleb(q.as_tuple().exponent)
    try:
        return any(x.quantize(step, rounding=r) == q for r in (ROUND_HALF_UP, ROUND_HALF_EVEN))
    except InvalidOperation:  # x far too large for the digits of q ("67e51" of a run id)
        return False


def _cells(row: str) -> list[str]:
    return [c.strip().replace("**", "") for c in row.strip().strip("|").split("|")]


def _output_tables() -> dict[tuple[str, str], list[dict[str, list[str]]]]:
    """(grid, metric) -> the tables of its skill_gain output, each arm -> the numbers of its row, in order."""
    out: dict[tuple[str, str], list[dict[str, list[str]]]] = {}
    for name in SKILL_OUTPUTS:
        argv, body = _committed(name)
        if argv[0] == "analysis.skill_gain":
            metric = argv[argv.index("--metric") + 1] if "--metric" in argv else "accuracy_verified_flexible"
            tables = [
                {_cells(r)[0]: NUMBER.findall(" ".join(_cells(r)[1:])) for r in t[2:]} for t in _tables(body)
            ]
            out[(Path(argv[1]).name, metric)] = tables
    return out


def _in_order(quoted: list[str], printed: list[str]) -> list[str]:
    """The numbers of ``quoted`` that are not, in their order, numbers of ``printed`` (:func:`_shown`)."""
    missing, at = [], 0
    for q in quoted:
        j = next((j for j in range(at, len(printed)) if _shown(q, printed[j])), None)
        if j is None:
            missing.append(q)
        else:
            at = j + 1
    return missing


def _unquoted(header: list[str], row: list[str], outputs: dict) -> list[str]:
    """The numbers of a README table row that no output row gives, [] when one does: the row's own
    columns, in order, must be the numbers of one row of a verified-flexible output (one arm, one table);
    its strict / flexible columns that arm's leaderboard row under ``--metric`` on the same grid."""
    own, other = [], {}
    for h, cell in zip(header[1:], row[1:]):
        metric = next((m for k, m in METRIC_COLUMNS.items() if h.startswith(k)), None)
        if h not in RECIPE_COLUMNS:
            (other.setdefault(metric, []) if metric else own).extend(NUMBER.findall(cell))
    best = [*own, *(n for ns in other.values() for n in ns)]
    for (grid, metric), tables in outputs.items():
        if metric != "accuracy_verified_flexible":
            continue
        for arm, numbers in (a for t in tables for a in t.items()):
            missing = _in_order(own, numbers)
            for m, quoted in other.items():
                board = (outputs.get((grid, m)) or [{}])[0]
                missing += _in_order(quoted, board.get(arm, []))
            best = min(best, missing, key=len)
    return best


def _skill_sections() -> list[tuple[str, set[str]]]:
    """The sections of results/README.md that name a skill_gain command of the oxrl_skill grids in full,
    each with those commands (whitespace normalised)."""
    out = []
    for section in _page("results/README.md").split("\n## "):
        named = {
            " ".join(c.split()) for c in re.findall(r"`(python -m analysis\.skill_gain\s[^`]*)`", section)
        }
        named = {c for c in named if "..." not in c and c.split()[3].startswith("results/oxrl_skill")}
        out += [(section, named)] if named else []
    return out


def test_the_oxrl_skill_tables_are_the_skill_gain_outputs():
    """Each section of results/README.md that names a skill_gain command of the oxrl_skill grids: every
    command it names in full has a committed output, and the numbers of each row of its tables are, in
    their order, an output row's (:func:`_unquoted`)."""
    commands = {" ".join(["python", "-m", *_committed(n)[0]]) for n in SKILL_OUTPUTS}
    verbatim = set(_committed("oxrl_skill_analysis/leaderboard_agreement.md")[1].splitlines())
    outputs, sections, bad = _output_tables(), _skill_sections(), []
    assert sections and all(named <= commands for _, named in sections), "a named command has no output"
    for table in (t for section, _ in sections for t in _tables(section)):
        if set(table) <= verbatim:
            continue  # the two leaderboards: checked character for character above
        header = _cells(table[0])
        for row in table[2:]:
            missing = _unquoted(header, _cells(row), outputs)
            bad += [f"{row[:60]}…: {missing}"] if missing else []
    texts = [_committed(n)[1] for n in SKILL_OUTPUTS]
    for section, _ in sections:
        bad += _unquoted_prose("## oxrl_skill", section, texts)
        bad += [f"interval {q}" for q in _unquoted_intervals(section, texts)]
    assert bad == [], "numbers no committed output gives:\n" + "\n".join(bad)


# -- the other sections of results/README.md that quote analysis output (issue 40, item 8) -----------------
# Each section below names the commands that made its numbers. A command with ``--out DIR`` (or one whose
# default output directory is DEFAULT_OUT's) writes DIR, which is committed: it is rewritten here into a
# temporary directory and must be the committed files byte for byte; any other command's output is a
# committed "$ python -m" file (above). Every row of the section's tables must give, in order, the numbers
# of one row of those outputs' tables (or of two rows that name it: an arm's scores, then its comparison),
# each rounded to the digits the page shows, and every confidence interval its text quotes ("+0.036
# [−0.002, +0.074]") must be one of theirs. UNSCRIPTED names the tables no committed script prints, and why.

SECTIONS = [
    "## testbed_control",
    "## isocompute_flexible",
    "## isocompute_flexible_sampled",
    "## isocompute_matched_m",
    "## isocompute_flexible_wide",
    "## oxrl_core",
    "## oxrl_core_v1",
    "## dpo_variants",
    "## lora_factorial",
    "## lora_lr_sweep and lora_own_lr",
    "## The board",
    "## countdown_core",
]
#: where a command that takes no ``--out`` writes (its argparse default)
DEFAULT_OUT = {"analysis.relabel_staleness": "results/staleness_relabelled"}
#: (section, the table's header row) -> why no committed script prints that table's numbers
UNSCRIPTED = {
    ("## oxrl_core", "| family | tasks (200 test documents each; `next` has 181) | kind | chance |"): (
        "the design: the task families' definitions (study_summary prints each lm-eval task's documents and "
        "chance, not the families' kinds or the in-domain task's chance)"
    ),
}
CI = re.compile(r"([+\-−]?\d[\d.]*) \[([+\-−]?\d[\d.]*), ([+\-−]?\d[\d.]*)\]")
#: a p value of the prose: "p = 0.0007", "p 0.003", "p_adj 0.17", "Holm p = 0.017"
PROSE_P = re.compile(r"\bp(?:_adj)? =? ?(\d[\d.]*(?:e[+\-−]?\d+)?)")
#: a percentage of the prose ("28.9%")
PROSE_PCT = re.compile(r"(?<![\w.])([+\-−]?\d+(?:\.\d+)?)%")
#: a mean ± SD of the prose ("+3.1 ± 2.1")
PROSE_SD = re.compile(r"([+\-−]?\d[\d.]*) ± (\d[\d.]*)")
_WITHDRAWN = "the first, withdrawn analysis (seed-only, CISPO counted apart), quoted as history"
_FIRST_TRY = "a first try of the mixture bases, before the committed ones: its records were not kept"
#: (section, a p value or percentage its prose quotes) -> why no committed script prints it
HISTORICAL = {
    ("## oxrl_core", "0.009"): _WITHDRAWN,
    ("## oxrl_core_v1", "0.084"): _WITHDRAWN,
    ("## oxrl_core", "17.3%"): _FIRST_TRY,
    ("## oxrl_core", "44.7%"): _FIRST_TRY,
}


def _section(heading: str) -> str:
    """The text of results/README.md under ``heading`` (its title up to the colon), to the next heading
    of its level or above."""
    lines, level = _page("results/README.md").splitlines(), heading.split()[0]
    start = next(
        i
        for i, line in enumerate(lines)
        if line.startswith(heading) and line[len(heading) :][:1] in ("", ":", " ")
    )
    end = next(
        (
            i
            for i in range(start + 1, len(lines))
            if lines[i].startswith("#")
            and len(lines[i].split()[0]) <= len(level)
            and set(lines[i].split()[0]) == {"#"}
        ),
        len(lines),
    )
    return "\n".join(lines[start:end])


def _named(section: str) -> list[str]:
    """The ``python -m analysis.…`` commands ``section`` names in full, whitespace normalised, in order."""
    found = (" ".join(c.split()) for c in re.findall(r"`(python -m analysis\.[^`]*)`", section))
    return list(dict.fromkeys(c for c in found if "..." not in c and "<" not in c))


def _out_dir(argv: list[str]) -> str | None:
    """The directory a command (argv after ``python -m``) writes, None for one that only prints."""
    return argv[argv.index("--out") + 1] if "--out" in argv else DEFAULT_OUT.get(argv[0])


def _outputs_of(command: str) -> list[str]:
    """What a command the page names made, as committed: its "$ python -m" file's body, or the markdown
    files it wrote under its output directory."""
    argv = command.split()[2:]
    bodies = [body for a, body in map(_committed, OUTPUTS) if a == argv]
    if out := _out_dir(argv):
        bodies += [
            p.read_text(encoding="utf-8") for p in sorted((ROOT / out).glob("*.md")) if not _is_output(p)
        ]
    return bodies


def _numbers(text: str) -> list[str]:
    """The numbers of ``text`` in order, thousands separators dropped ("4,096" is 4096)."""
    return NUMBER.findall(re.sub(r"(?<=\d),(?=\d{3}\b)", "", text))


#: the commands of SECTIONS that write a committed directory, regenerated by the next test
OUT_COMMANDS = sorted({c for h in SECTIONS for c in _named(_section(h)) if _out_dir(c.split()[2:])})


@pytest.mark.parametrize("command", OUT_COMMANDS, ids=[_out_dir(c.split()[2:]) for c in OUT_COMMANDS])
def test_the_committed_output_directories_are_what_their_commands_write(command, tmp_path):
    argv = command.split()[2:]
    committed = ROOT / _out_dir(argv)
    if "--out" in argv:
        argv = argv[: argv.index("--out")] + argv[argv.index("--out") + 2 :]
    _printed([*argv, "--out", str(tmp_path)])
    written = sorted(p.name for p in tmp_path.iterdir())
    differ = [
        n
        for n in written
        if not (committed / n).is_file() or (committed / n).read_bytes() != (tmp_path / n).read_bytes()
    ]
    assert written and differ == [], f"{committed.relative_to(ROOT)}: {differ} differ; rerun '{command}'"


def _row_numbers(outputs: list[str]) -> list[tuple[set[str], list[str]]]:
    """Every line of ``outputs`` (a markdown table's row or a printed DataFrame's): its words, and its
    numbers in order."""
    return [
        (set(line.replace("|", " ").split()), _numbers(line))
        for text in outputs
        for line in text.splitlines()
    ]


def _given(row: list[str], lines: list[tuple[set[str], list[str]]]) -> bool:
    """The numbers of a table row are, in order, those of one output line, or of two lines that both
    name the row (the first word of each of its cells without a number, "orpo" or "tiny-m" and "rft": an
    arm's scores in one table, its comparison in another), the first giving the row's first numbers."""
    quoted = _numbers(" ".join(row))
    if any(_in_order(quoted, printed) == [] for _, printed in lines):
        return True
    label = {c.strip("*").split()[0] for c in row if c.strip("*").strip() and not _numbers(c)}
    named = [printed for words, printed in lines if label and label <= words]
    return any(
        any(_in_order(quoted[:k], a) == [] for a in named)
        and any(_in_order(quoted[k:], b) == [] for b in named)
        for k in range(1, len(quoted))
    )


def _unquoted_rows(heading: str, section: str, lines: list[tuple[set[str], list[str]]]) -> list[str]:
    """The rows of the section's tables whose numbers no output line gives (:func:`_given`)."""
    bad = []
    for table in _tables(section):
        if (heading, table[0]) in UNSCRIPTED:
            continue
        bad += [
            f"{row[:70]}…"
            for row in table[2:]
            if _numbers(" ".join(_cells(row))) and not _given(_cells(row), lines)
        ]
    return bad


def _unquoted_intervals(section: str, outputs: list[str]) -> list[str]:
    """The intervals "Δ [lo, hi]" of the section's text (its tables left out) that no output prints, as
    such or as three numbers in a row of one line (a DataFrame's delta, ci_low, ci_high)."""
    text = "\n".join(line for line in section.splitlines() if not line.strip().startswith("|"))
    printed = [m for o in outputs for m in CI.findall(re.sub(r"(?<=\d),(?=\d{3}\b)", "", o))]
    printed += [
        tuple(ns[i : i + 3])
        for o in outputs
        for line in o.splitlines()
        for ns in [_numbers(line)]
        for i in range(len(ns) - 2)
    ]
    return [
        " ".join(q)
        for q in CI.findall(" ".join(text.split()))
        if not any(all(_shown(a, b) for a, b in zip(q, p)) for p in printed)
    ]


def _prose(section: str) -> str:
    """The section's text without its tables, whitespace normalised."""
    return " ".join(
        " ".join(line for line in section.splitlines() if not line.strip().startswith("|")).split()
    )


def _unquoted_prose(heading: str, section: str, outputs: list[str]) -> list[str]:
    """The p values of the section's prose that no output prints (rounded as the page shows them,
    :func:`_shown`) and not in HISTORICAL, and its "mean ± SD" pairs that no output line gives in order."""
    printed = [n for o in outputs for n in _numbers(o)]
    lines = [_numbers(line) for o in outputs for line in o.splitlines()]
    text = _prose(section)
    bad = [
        f"p = {q}"
        for q in (m.rstrip(".") for m in PROSE_P.findall(text))
        if (heading, q) not in HISTORICAL and not any(_shown(q, x) for x in printed)
    ]
    bad += [
        f"{q}%"
        for q in PROSE_PCT.findall(text)
        if (heading, f"{q}%") not in HISTORICAL and not _percent(q, printed)
    ]
    return bad + [
        f"{m} ± {sd}"
        for m, sd in PROSE_SD.findall(text)
        if not any(_in_order([m, sd], n) == [] for n in lines)
    ]


def _percent(quoted: str, printed: list[str]) -> bool:
    """``quoted`` (a percentage) is a printed number, as a percentage or as a fraction, rounded as shown."""
    for x in printed:
        value = Decimal(x.replace("−", "-"))
        if abs(value) < 10**6 and (_shown(quoted, x) or _shown(quoted, str(value * 100))):
            return True
    return False


def test_prose_p_values_and_sds_must_be_printed():
    """A p value or a mean ± SD of the prose that no output prints fails; one rounded as printed passes."""
    outputs = ["| arm | +3.14 ± 2.08 | p 0.00074 |"]
    assert _unquoted_prose("## x", "Pooled +3.1 ± 2.1, p = 0.0007; seed-only p 7e-4.", outputs) == []
    assert _unquoted_prose("## x", "Pooled +3.1 ± 2.2 (p = 0.0008).", outputs) == ["p = 0.0008", "+3.1 ± 2.2"]
    assert _unquoted_prose("## x", "| p = 0.5 |\nA table's p is a row's.", outputs) == []
    assert _unquoted_prose("## oxrl_core", "first written p_adj 0.009.", outputs) == []  # HISTORICAL
    assert _unquoted_prose("## x", "It changed 0.07% and 2.1%, not 2.2%.", outputs) == [
        "2.2%"
    ]  # 7e-4 = 0.07%


def test_a_row_is_one_output_line_or_two_that_name_it():
    """An arm's scores and its comparison, printed in two tables, make one README row; lines that do not
    name the row's arm, or a number off in its last digit, do not."""
    lines = _row_numbers(
        ["0 tiny-s orpo 5 66.5 3.5", "0 tiny-s orpo +22.73 +15.62 +29.85 1.6e-05", "1 cpo +3.5"]
    )
    assert _given(["orpo", "66.5 ± 3.5", "+22.7 [+15.6, +29.9]", "2e-5"], lines)
    assert not _given(["orpo", "66.5 ± 3.6", "+22.7 [+15.6, +29.9]"], lines)
    assert not _given(["cpo", "66.5 ± 3.5", "+22.7 [+15.6, +29.9]"], lines)
    assert _given(["cpo", "+3.5"], lines) and not _given(["kto", "66.5 ± 3.5", "+3.5"], lines)


@pytest.mark.parametrize("heading", SECTIONS)
def test_the_section_numbers_are_what_its_commands_print(heading):
    """Every command the section names in full has a committed output; each row of its tables and each
    confidence interval of its text is one of those outputs' (:func:`_shown`)."""
    section = _section(heading)
    outputs = {c: _outputs_of(c) for c in _named(section)}
    assert outputs and [c for c, o in outputs.items() if not o] == [], (
        "a named command has no committed output"
    )
    texts = [o for os in outputs.values() for o in os]
    unscripted = [h for (s, h) in UNSCRIPTED if s == heading]
    assert all(h in [t[0] for t in _tables(section)] for h in unscripted), "an UNSCRIPTED table left the page"
    bad = _unquoted_rows(heading, section, _row_numbers(texts))
    bad += [f"interval {q}" for q in _unquoted_intervals(section, texts)]
    bad += _unquoted_prose(heading, section, texts)
    assert bad == [], f"{heading}: numbers no committed output gives:\n" + "\n".join(bad)


def test_the_relabelled_labels_cover_every_committed_online_record():
    """``results/staleness_relabelled/labels.csv`` (``python -m analysis.relabel_staleness``, too slow to
    rerun here) labels every finished online record committed under results/ outside the grids it names
    as left out (``NOT_RELABELLED``, each with its reason), and no other: a grid committed after the
    script last ran fails here until it is rerun or named there."""
    from analysis.relabel_staleness import NOT_RELABELLED
    from analysis.runs import _records

    committed = {
        (d.name, r["run_id"])
        for d in sorted(p for p in RESULTS.iterdir() if p.is_dir() and p.name not in NOT_RELABELLED)
        for r in (_records(d) if any(d.rglob("run.json")) else [])
        if r["status"] == "finished" and r.get("paradigm") == "online"
    }
    with (RESULTS / "staleness_relabelled/labels.csv").open(encoding="utf-8") as f:
        labelled = {(row["directory"], row["run_id"]) for row in csv.DictReader(f)}
    assert committed - labelled == set(), "records not relabelled: rerun python -m analysis.relabel_staleness"
    assert labelled - committed == set(), "labels of records no longer committed"


CLAIMS = "## The reference study's claims beside ours"


def _study_texts() -> dict[str, list[str]]:
    """Per study with an analysis directory (``oxrl_core_v1`` for ``results/oxrl_core_v1_analysis``),
    what its committed outputs print: its "$ python -m" files' bodies and its markdown files."""
    texts: dict[str, list[str]] = {}
    for p in sorted(RESULTS.glob("*_analysis/*")):
        name = str(p.relative_to(RESULTS))
        if p.suffix == ".md" or name in OUTPUTS:
            body = _committed(name)[1] if name in OUTPUTS else p.read_text(encoding="utf-8")
            texts.setdefault(p.parent.name.removesuffix("_analysis"), []).append(body)
    return texts


def _sorted_values(numbers) -> tuple[list[float], list[str]]:
    pairs = sorted((float(n.replace("−", "-")), n) for n in set(numbers))
    return [v for v, _ in pairs], [n for _, n in pairs]


def _near(quoted: str, values: tuple[list[float], list[str]]) -> bool:
    """``quoted`` is one of the printed numbers (sorted by :func:`_sorted_values`) rounded (:func:`_shown`):
    only those within one unit of its last digit are compared."""
    floats, strings = values
    q = float(quoted.replace("−", "-"))
    step = 10.0 ** Decimal(quoted.replace("−", "-")).as_tuple().exponent
    lo, hi = bisect.bisect_left(floats, q - step), bisect.bisect_right(floats, q + step)
    return any(_shown(quoted, p) for p in strings[lo:hi])


def test_the_claims_table_quotes_only_printed_numbers():
    """Each number of the claims table's "ours" column is printed by a committed output of a study the
    row names (``oxrl_core_v1``, ``dpo_variants``, ...; a row that names none: of any study). Looser
    than a section's check (the column gathers numbers from several outputs into prose), it still
    catches a number that no script prints or that drifted from the one printed."""
    texts = _study_texts()
    values = {s: _sorted_values(n for t in ts for n in _numbers(t)) for s, ts in texts.items()}
    (table,) = _tables(_section(CLAIMS))
    assert _cells(table[0])[2] == "ours"
    bad = []
    for row in table[2:]:
        ours = _cells(row)[2]
        named = [s for s in texts if re.search(rf"(?<![\w/]){s}(?![\w])", ours)] or list(texts)
        bad += [
            f"claim {_cells(row)[0]}: {n}"
            for n in _numbers(ours)
            if not any(_near(n, values[s]) for s in named)
        ]
    assert bad == [], "numbers no committed output of the studies named prints:\n" + "\n".join(bad)


# -- docs/ pages that quote study results (issue 40, item 8) --------------------------------------------------
#: docs pages whose numbers are not study results, and where they come from instead
NOT_STUDY_PAGES = {
    "docs/cli_latency.md": "a benchmark's timings (benchmarks/cli_latency.py, run by hand on a loaded machine)",
}
#: (page, an interval or p value it quotes) -> why no committed output prints it now
HISTORICAL_DOCS = {
    (
        "docs/claims.md",
        "−0.18 [−0.41, −0.06]",
    ): "the slope before the 4.2e-4 step was pooled, quoted as history",
}


def test_docs_quote_only_printed_study_numbers():
    """Every confidence interval and prose p value on a docs page is printed by a committed study output
    (``results/*_analysis/``, a grid's ``README.md`` under results/), rounded as the page shows it: looser
    than a results section's check (any study's output), it catches a number no script prints."""
    texts = [body for bodies in _study_texts().values() for body in bodies]
    texts += [p.read_text(encoding="utf-8") for p in sorted(RESULTS.glob("*/README.md"))]
    values = _sorted_values(n for t in texts for n in _numbers(t))
    bad = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        name = str(page.relative_to(ROOT))
        if name in NOT_STUDY_PAGES:
            continue
        text = page.read_text(encoding="utf-8")
        for lo_hi in CI.findall(" ".join(text.split())):
            quoted = f"{lo_hi[0]} [{lo_hi[1]}, {lo_hi[2]}]"
            if (name, quoted) not in HISTORICAL_DOCS and not all(_near(n, values) for n in lo_hi):
                bad.append(f"{name}: {quoted}")
        for q in (m.rstrip(".") for m in PROSE_P.findall(_prose(text))):
            if (name, q) not in HISTORICAL_DOCS and not _near(q, values):
                bad.append(f"{name}: p = {q}")
    assert bad == [], "numbers no committed study output prints:\n" + "\n".join(bad)
