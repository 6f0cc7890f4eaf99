"""analysis.report: the self-contained HTML leaderboard, parsed back and checked against analysis."""

from __future__ import annotations

import base64
import hashlib
import math
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from run_records import run_record, write_run

import analysis
from analysis.report import render_report, write_report

XSS = '<img src=x onerror="window.__xss=1">'
XSS_ERROR = "CUDA out of memory </td><script>window.__xss=2</script>"
SCALES = {"tiny": 1_000_000, "small": 10_000_000, "Qwen/Qwen2.5-0.5B": 494_000_000}
PARADIGMS = {"dpo": "offline", "simpo": "offline_ref_free", "kto": "unpaired", XSS: "offline"}
SLUGS = {"dpo": "dpo", "simpo": "simpo", "kto": "kto", XSS: "xss"}
#: accuracy = BASE[method] + GAIN[scale] (+ kto's late boost) + NOISE[seed]
BASE = {"dpo": 0.40, "simpo": 0.50, "kto": 0.38, XSS: 0.42}
GAIN = {"tiny": 0.0, "small": 0.10, "Qwen/Qwen2.5-0.5B": 0.20}
NOISE = (-0.010, 0.0, 0.012)
N_TEST, N_OOD = 40, 10


def accuracy(method: str, scale: str, seed: int) -> float:
    late = 0.05 if (method, scale) == ("kto", "Qwen/Qwen2.5-0.5B") else 0.0  # kto overtakes dpo
    return BASE[method] + GAIN[scale] + late + NOISE[seed % len(NOISE)]


def outcomes(method: str, seed: int, acc: float) -> list[dict]:
    """Deterministic per-problem results whose test accuracy is close to ``acc``."""
    offset = sorted(BASE).index(method) * 13 + seed * 3
    rows = [
        {"id": f"q{i}", "split": "test", "correct": (i * 37 + offset) % 100 < 100 * acc}
        for i in range(N_TEST)
    ]
    rows += [
        {"id": f"o{i}", "split": "ood", "correct": (i * 41 + offset) % 100 < 80 * acc} for i in range(N_OOD)
    ]
    return rows


def record(method: str, scale: str, seed: int, status: str = "finished", **overrides) -> dict:
    acc = accuracy(method, scale, seed)
    metrics = {
        "accuracy": acc,
        "ood_accuracy": None if method == XSS else acc - 0.1,
        "best_at_4": acc + 0.15,
    }
    own = {
        "scale_params": SCALES[scale],
        "paradigm": PARADIGMS[method],
        "run_id": f"{scale.replace('/', '_')}-{SLUGS[method]}-s{seed}",
        "error": None,
        "config_hash": f"cfg-{SLUGS[method]}-{seed}",
        "packages": {"torch": "2.13.0", "trl": "1.16.0"},
        "timing": {"total_s": 12.5},
        "data_order_sha": f"order-{seed}",
        "metrics": metrics if status == "finished" else None,
    }
    return run_record(method, scale, seed, status, **{**own, **overrides})


def make_grid(root: Path) -> Path:
    """3 scales x 4 methods (one named like an XSS payload) x 3 seeds, OOD, eval.jsonl, one failed run."""
    for scale in SCALES:
        for method in BASE:
            for seed in range(3):
                rec = record(method, scale, seed)
                write_run(root, rec, outcomes=outcomes(method, seed, rec["metrics"]["accuracy"]))
    failed = record(
        "simpo", "tiny", 3, status="failed", error=XSS_ERROR, traceback="Traceback:\n  <b>boom</b>",
        git_sha="cafef00d", packages={"torch": "2.13.0", "trl": "1.15.0"},
    )  # fmt: skip
    write_run(root, failed)
    return root


@pytest.fixture(scope="module")
def grid(tmp_path_factory) -> Path:
    return make_grid(tmp_path_factory.mktemp("grid"))


@pytest.fixture(scope="module")
def html(grid) -> str:
    path = write_report(grid)
    assert path == grid / "report.html"
    return path.read_text(encoding="utf-8")


class Page(HTMLParser):
    """Every table of a page as {id: {"head": [...], "rows": [[(text, data-sort), ...]]}} plus every tag."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, dict] = {}
        self.tags: list[tuple[str, dict]] = []
        self._table = self._cell = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        if tag == "table":
            self._table = self.tables.setdefault(
                attrs.get("id") or f"anon-{len(self.tables)}", {"head": [], "rows": []}
            )
        elif self._table is not None and tag == "tr":
            self._table["rows"].append([])
        elif self._table is not None and tag in ("td", "th"):
            self._cell = [tag, [], attrs.get("data-sort")]

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[1].append(data)

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            kind, text, sort = self._cell
            text = " ".join("".join(text).split())
            if kind == "th":
                self._table["head"].append(text)
                self._table["rows"].pop() if self._table["rows"] == [[]] else None
            else:
                self._table["rows"][-1].append((text, sort))
            self._cell = None
        elif tag == "table":
            self._table = None


def column(table: dict, name: str) -> int:
    return next(i for i, h in enumerate(table["head"]) if h.startswith(name))


def row_of(table: dict, method: str) -> list[tuple[str, str]]:
    return next(r for r in table["rows"] if r[0][0] == method)


def test_report_has_every_table_and_section(html):
    page = Page(html)
    for table in ("leaderboard-0", "leaderboard-1", "leaderboard-2", "leverage", "inversions", "ood-spread",
                  "paired-0", "paired-1", "failed", "provenance"):  # fmt: skip
        assert table in page.tables, table
    for heading in ("vs scale", "Forest plot", "Leverage", "Rank inversions", "out-of-distribution",
                    "Paired tests", "Failed runs", "Provenance", "Package versions"):  # fmt: skip
        assert heading in html, heading
    assert sum(1 for tag, _ in page.tags if tag == "svg" and "plot" in _.get("class", "")) == 5
    # Scales appear in scale_params order, not by name ("Qwen/..." sorts first by name).
    assert [h for h in re.findall(r'<h3 id="scale-\d">([^<]+)<', html)] == [
        "tiny ",
        "small ",
        "Qwen/Qwen2.5-0.5B ",
    ]
    board = page.tables["leaderboard-0"]
    assert board["head"][-2:] == ["OOD acc. (%) [95% CI]", "best@4 (%) [95% CI]"]
    assert len(board["rows"]) == 4


def test_leaderboard_numbers_match_analysis(grid, html):
    """The cells equal analysis.crossed's two-way tables (seeds × problems, the default unit), with the
    seed-only numbers of summarize / welch_vs_baseline beside them."""
    from analysis.crossed import BOTH, two_way_summary, two_way_vs_baseline

    runs, outcomes = analysis.load_runs(grid), analysis.load_problem_outcomes(grid)
    summary = two_way_summary(runs, outcomes, "accuracy").set_index(["scale", "method"])
    tests = two_way_vs_baseline(runs, outcomes, "accuracy", "dpo", correction="bonferroni", alpha=0.05)
    seed_only = analysis.summarize(runs).set_index(["scale", "method"]).loc[("Qwen/Qwen2.5-0.5B", "simpo")]
    board = Page(html).tables["leaderboard-2"]
    s = summary.loc[("Qwen/Qwen2.5-0.5B", "simpo")]
    t = tests.set_index(["scale", "method"]).loc[("Qwen/Qwen2.5-0.5B", "simpo")]
    row = row_of(board, "simpo")
    assert s["unit"] == t["unit"] == BOTH and s["n_problems"] == 40
    expected = f"{100 * s['mean']:.1f} [{100 * s['ci_low']:.1f}, {100 * s['ci_high']:.1f}]"
    assert row[column(board, "accuracy")] == (expected, repr(float(s["mean"])))
    # seeds 0.690, 0.700, 0.712: mean 0.70067 ± t_{.975,2}·s/√3 = 0.02736 over seeds alone
    assert row[column(board, "seeds only")][0] == "[67.3, 72.8]"
    assert seed_only["ci_low"] == pytest.approx(0.7007 - 0.0274, abs=1e-4)
    # 40 problems: the two-way interval is wider than the seed-only one
    assert s["ci_high"] - s["ci_low"] > seed_only["ci_high"] - seed_only["ci_low"]
    assert row[column(board, "Δ vs baseline")][0] == (
        f"{100 * t['delta']:+.1f} [{100 * t['ci_low']:.1f}, {100 * t['ci_high']:.1f}]"
    )
    fmt = lambda p: f"{p:.1e}" if p < 1e-3 else f"{p:.3f}"  # noqa: E731
    assert row[column(board, "p_adj")][0] == fmt(t["p_adj"])
    assert row[column(board, "p_adj, seeds only")][0] == fmt(t["seed_p_adj"])
    assert t["significant"] == (t["p_adj"] < 0.05)
    assert row[column(board, "Sig.")][0] == ("▲ sig." if t["significant"] else "n.s.")
    assert row_of(board, "dpo")[column(board, "Sig.")][0] == "baseline"
    # Rows start sorted by mean, best first.
    means = [float(r[column(board, "accuracy")][1]) for r in board["rows"]]
    assert means == sorted(means, reverse=True) and board["rows"][0][0][0] == "simpo"
    # OOD: the XSS-named method has none.
    assert row_of(board, XSS)[column(board, "OOD")][0] == "—"


def test_rank_inversion_paired_and_ood_tables(grid, html):
    page = Page(html)
    runs = analysis.load_runs(grid)
    inv = analysis.rank_inversions(runs)
    last = page.tables["inversions"]["rows"][-1]
    assert [c[0] for c in last[:2]] == ["small", "Qwen/Qwen2.5-0.5B"]
    assert last[3][0] == f"{inv['tau'].iloc[-1]:+.3f}" and "kto" in last[6][0]
    paired = analysis.paired_vs_baseline(analysis.load_problem_outcomes(grid), runs)
    test_table = page.tables["paired-0"]
    assert len(test_table["rows"]) == len(paired) == 9
    first = paired.iloc[0]
    cells = next(r for r in test_table["rows"] if r[0][0] == first["scale"] and r[1][0] == first["method"])
    assert cells[6][0] == f"{100 * first['delta']:+.1f}"
    assert "Split ood" in " ".join(html.split()).replace("<code>", "").replace("</code>", "")
    spread = analysis.task_leverage(runs)
    assert page.tables["ood-spread"]["rows"][0][2][0] == f"{spread['id_spread'].iloc[0]:.1f}"


def test_failed_runs_and_provenance(html):
    page = Page(html)
    failed = page.tables["failed"]["rows"]
    assert [c[0] for c in failed[0][:4]] == ["tiny-simpo-s3", "tiny", "simpo", "3"]
    assert failed[0][4][0].startswith(XSS_ERROR)  # shown as text, traceback below it
    assert "<code>deadbeef</code>: 36 run(s)" in html and "<code>cafef00d</code>: 1 run(s)" in html
    assert "<code>1.15.0</code> (1), <code>1.16.0</code> (36)" in html
    prov = page.tables["provenance"]
    assert len(prov["rows"]) == 37
    row = row_of(prov, "tiny-dpo-s1")
    assert [c[0] for c in row[5:9]] == ["deadbeef", "cfg-dpo-1", "1", "order-1"]


def test_untrusted_strings_are_escaped(html):
    assert "&lt;img src=x onerror=" in html
    assert not re.search(r"<img", html, re.IGNORECASE)
    assert len(re.findall(r"<script", html, re.IGNORECASE)) == 1  # the report's own sorting script
    assert "&lt;/td&gt;&lt;script&gt;window.__xss=2" in html
    assert "&lt;b&gt;boom&lt;/b&gt;" in html and "<b>" not in html
    assert "onerror" not in {k for _, attrs in Page(html).tags for k in attrs}


def test_no_external_resources(html):
    page = Page(html)
    assert "http://" not in html and "https://" not in html and "@import" not in html
    assert not re.search(r"url\((?!#)", html)  # only the figures' own clip paths, url(#id), in this document
    assert not [a for _, a in page.tags if "src" in a]
    assert all(a["href"].startswith("#") for _, a in page.tags if "href" in a)
    assert not [t for t, _ in page.tags if t in ("link", "iframe", "object", "embed", "img")]
    csp = next(
        a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"
    )
    assert csp.startswith("default-src 'none';")


def test_csp_allows_exactly_the_inline_script(html):
    """The CSP's script hash is the SHA-256 of the one inline script, so it runs and nothing else does."""
    script = re.search(r"<script>(.*?)</script>", html, re.DOTALL).group(1)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    csp = next(a["content"] for t, a in Page(html).tags if t == "meta" and a.get("http-equiv"))
    assert f"script-src 'sha256-{digest}';" in csp


def test_correction_and_alpha_are_applied(grid):
    """correction='none', alpha=0.5: p_adj is the raw two-way p, and the decision follows it."""
    from analysis.crossed import two_way_vs_baseline

    html = render_report(grid, correction="none", alpha=0.5)
    runs, outcomes = analysis.load_runs(grid), analysis.load_problem_outcomes(grid)
    raw = two_way_vs_baseline(runs, outcomes, "accuracy", "dpo", correction="none", alpha=0.5)
    t = raw.set_index(["scale", "method"]).loc[("tiny", "kto")]
    board = Page(html).tables["leaderboard-0"]
    row = row_of(board, "kto")
    assert row[column(board, "p_adj")][0] == f"{t['p']:.3f}" and t["p_adj"] == t["p"]
    assert row[column(board, "Sig.")][0] == ("▼ sig." if t["p"] < 0.5 else "n.s.")
    assert "Light wide bar" not in html and "Bonferroni simultaneous" in render_report(
        grid, correction="holm"
    )


def test_empty_or_missing_directory_is_a_one_line_value_error(tmp_path):
    with pytest.raises(ValueError, match="no run records") as err:
        write_report(tmp_path)
    assert "\n" not in str(err.value) and not (tmp_path / "report.html").exists()
    with pytest.raises(ValueError, match="no such results directory"):
        write_report(tmp_path / "missing")
    make_grid(tmp_path / "g")
    with pytest.raises(ValueError, match="no finished run reports metric 'bleu'"):
        write_report(tmp_path / "g", metric="bleu")
    with pytest.raises(ValueError, match="unknown correction"):
        write_report(tmp_path / "g", correction="fdr")


def test_single_seed_per_cell(tmp_path):
    for scale in ("tiny", "small"):
        for method in ("dpo", "simpo", "kto"):
            write_run(tmp_path, record(method, scale, 0))
    page = Page(write_report(tmp_path).read_text())
    html = (tmp_path / "report.html").read_text()
    assert "single seed" in html
    board = page.tables["leaderboard-0"]
    simpo = row_of(board, "simpo")
    assert simpo[column(board, "accuracy")][0] == f"{100 * accuracy('simpo', 'tiny', 0):.1f}"
    assert simpo[column(board, "Δ vs baseline")][0] == "+10.0"
    assert simpo[column(board, "p_adj")][0] == "—" and simpo[column(board, "Sig.")][0] == "n/a"
    assert "failed" not in page.tables and "Light wide bar" not in html  # no failed run; m = 0 tests


def test_failed_runs_only(tmp_path):
    write_run(tmp_path, record("dpo", "tiny", 0, status="failed", error="OOM"))
    write_run(tmp_path, record("kto", "small", 1, status="failed", error=None))
    html = write_report(tmp_path).read_text()
    page = Page(html)
    assert "No finished run" in html and not [k for k in page.tables if k.startswith("leaderboard")]
    rows = page.tables["failed"]["rows"]
    assert [(r[0][0], r[4][0]) for r in rows] == [
        ("tiny-dpo-s0", "OOM"),
        ("small-kto-s1", "(no error recorded)"),
    ]


def test_missing_baseline_falls_back_and_says_so(tmp_path):
    """No dpo: 'kto' is the first method alphabetically present at every scale ('aaa' is not)."""
    PARADIGMS["aaa"], BASE["aaa"], SLUGS["aaa"] = "offline", 0.3, "aaa"
    try:
        for seed in range(2):
            write_run(tmp_path, record("aaa", "tiny", seed))
            for scale in ("tiny", "small"):
                for method in ("kto", "simpo"):
                    write_run(tmp_path, record(method, scale, seed))
        html = write_report(tmp_path).read_text()
    finally:
        for table in (PARADIGMS, BASE, SLUGS):
            del table["aaa"]
    assert "Baseline &#39;dpo&#39; has no finished run; comparing against &#39;kto&#39;" in html
    board = Page(html).tables["leaderboard-1"]
    assert row_of(board, "kto")[column(board, "Sig.")][0] == "baseline"
    assert row_of(board, "simpo")[column(board, "Δ vs baseline")][0].startswith("+12.0 [")


def test_lora_runs_are_separate_arms(tmp_path):
    for seed in range(2):
        write_run(tmp_path, record("dpo", "tiny", seed))
        write_run(tmp_path, record("dpo", "tiny", seed, lora=True, run_id=f"lora-{seed}",
                                   metrics={"accuracy": 0.3 + seed / 100}))  # fmt: skip
    board = Page(write_report(tmp_path).read_text()).tables["leaderboard-0"]
    assert sorted(r[0][0] for r in board["rows"]) == ["dpo", "dpo (LoRA)"]
    assert row_of(board, "dpo (LoRA)")[column(board, "accuracy")][0].startswith("30.5 [")
    assert math.isfinite(float(row_of(board, "dpo (LoRA)")[column(board, "Δ vs baseline")][1]))


def test_report_names_a_bad_record_and_goes_on_or_exits_2_when_strict(tmp_path):
    """A truncated run.json beside good ones: ``oxbench report`` warns with the file's name and writes the
    report from the others; ``--strict`` makes it the one-line error (exit 2) and writes nothing."""
    from typer.testing import CliRunner

    from oxbench_cli import app

    for seed in (0, 1):
        write_run(tmp_path, record("dpo", "tiny", seed))
    bad = tmp_path / "g" / "cut" / "run.json"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"run_id": "cut", "sta')
    r = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert r.exit_code == 0 and "warning" in r.output and f"{bad}: malformed run.json" in r.output
    assert (tmp_path / "report.html").is_file()
    (tmp_path / "report.html").unlink()
    r = CliRunner().invoke(app, ["report", str(tmp_path), "--strict"])
    assert r.exit_code == 2 and f"{bad}: malformed run.json" in r.output
    assert not (tmp_path / "report.html").exists()


def test_leaderboards_show_the_base_and_chance_rows_and_figures_are_saved(tmp_path):
    """The base model's and chance's rows sit under each leaderboard (a <tfoot>, never sorted among the
    arms), from the records' base_* metrics and chance; every figure is also a file in figures/."""
    for method in ("dpo", "simpo", "kto"):
        for seed in (0, 1):
            for scale in ("tiny", "small"):
                rec = record(method, scale, seed)
                rec["metrics"] |= {"base_accuracy": 0.30, "base_ood_accuracy": 0.2, "base_best_at_4": 0.5,
                                   "chance": 0.05, "ood_chance": 0.01}  # fmt: skip
                write_run(tmp_path, rec, outcomes=outcomes(method, seed, rec["metrics"]["accuracy"]))
    html = write_report(tmp_path).read_text()
    foot = html[html.index("<tfoot>") : html.index("</tfoot>")]
    cells = [" ".join(c.split()) for c in re.findall(r"<td[^>]*>(.*?)</td>", foot, re.S)]
    board = Page(html).tables["leaderboard-0"]
    ood, best = column(board, "OOD"), column(board, "best@4")
    base, chance = cells[: len(board["head"])], cells[len(board["head"]) :]
    assert base[0] == "base model" and base[3] == "30.0" and base[ood] == "20.0" and base[best] == "50.0"
    assert chance[0] == "chance" and chance[3] == "5.0" and chance[ood] == "1.0" and chance[best] == "—"
    names = sorted(p.name for p in (tmp_path / "figures").iterdir())
    for fig in ("accuracy_vs_scale", "forest_delta_vs_dpo", "leverage", "rank_by_scale", "id_vs_ood_spread"):
        assert f"{fig}.svg" in names and f"{fig}.pdf" in names, names
    assert (tmp_path / "figures" / "rank_by_scale.pdf").read_bytes()[:5] == b"%PDF-"


def test_a_leaderboard_ranks_the_metric_the_grid_names(tmp_path):
    """A study whose signals are flexible ranks skill: ``report: {metric: accuracy_verified_flexible}``
    in its grid (saved beside the records as report.json by ``oxbench run``) or ``oxbench report
    --metric`` ranks and tests that metric, with strict accuracy beside it as a column. An unknown
    metric, in the option or in report.json, is a one-line error (exit 2) naming where it was."""
    from typer.testing import CliRunner

    from oxbench.grid.spec import GridError, load_grid
    from oxbench_cli import app

    skill = {"dpo": 0.60, "simpo": 0.55, "kto": 0.50}  # strict is 0 for every arm: format was never asked
    for method in skill:
        for seed in (0, 1, 2):
            rec = record(method, "tiny", seed)
            rec["metrics"] |= {"accuracy": 0.0, "accuracy_verified_flexible": skill[method] + 0.01 * seed}
            write_run(tmp_path, rec)
    runner = CliRunner()

    def board() -> dict:
        return Page((tmp_path / "report.html").read_text()).tables["leaderboard-0"]

    r = runner.invoke(app, ["report", str(tmp_path), "--metric", "accuracy_verified_flexible"])
    assert r.exit_code == 0, r.output
    assert board()["head"][3].startswith("accuracy_verified_flexible (%)")
    assert [row[0][0] for row in board()["rows"]] == ["dpo", "simpo", "kto"]  # ranked by skill
    assert [row[column(board(), "strict")][0] for row in board()["rows"]] == ["0.0 [0.0, 0.0]"] * 3
    (tmp_path / "report.json").write_text('{"metric": "accuracy_verified_flexible", "baseline": "kto"}')
    assert runner.invoke(app, ["report", str(tmp_path)]).exit_code == 0  # the saved options are the default
    assert board()["head"][3].startswith("accuracy_verified_flexible (%)")
    (tmp_path / "report.json").write_text('{"metric": "skill"}')
    r = runner.invoke(app, ["report", str(tmp_path)])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1
    assert f"{tmp_path / 'report.json'}" in r.output and "metric" in r.output, r.output
    r = runner.invoke(app, ["report", str(tmp_path), "--metric", "verified_flexible"])
    assert r.exit_code == 2 and "'verified_flexible' is not one of" in r.output, r.output  # typer's choice
    grid = tmp_path / "g.yaml"
    grid.write_text("name: g\nreport: {metric: accuracy_verfied_flexible}\naxes: {seed: [0]}\n")
    with pytest.raises(GridError, match=r"g.yaml: field 'report.metric'"):
        load_grid(grid)


def test_a_report_drops_the_figures_of_an_earlier_report(tmp_path):
    """Figures are written on every render; one an earlier report wrote (another metric or baseline)
    and this one did not is removed, so figures/ holds this report's figures only."""
    import os

    for seed in (0, 1):
        for method in ("dpo", "simpo"):
            write_run(tmp_path, record(method, "tiny", seed))
    stale = tmp_path / "figures" / "forest_delta_vs_kto.svg"
    stale.parent.mkdir()
    stale.write_text("<svg/>")
    os.utime(stale, (1e9, 1e9))
    write_report(tmp_path)
    names = sorted(p.name for p in (tmp_path / "figures").iterdir())
    assert "forest_delta_vs_kto.svg" not in names and "forest_delta_vs_dpo.svg" in names, names
