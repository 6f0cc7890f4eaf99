"""How fast the ``oxbench`` command answers when it trains nothing (issue 26, item 4).

    python benchmarks/cli_latency.py [--repeats 5] [--baseline REV]

Each case is the command a user types (``python -m oxbench_cli ...``, a fresh process, from the
repository root): ``--help``, ``losses``, a grid's ``--plan``, and the one-line errors of bad input
(unknown loss, unknown hyper-parameter, a value out of range, NaN, a missing file, malformed YAML, ...).
Every repeat runs every case once, in a rotated order, so a burst of load on the machine spreads over
the cases; the table gives the median, the fastest and the slowest repeat per case, the exit code, and
which heavy libraries (torch, transformers, deepspeed, datasets, lm_eval) the command imported (from a
separate ``-X importtime`` run, not timed). An error case whose exit code is not 2 is marked ``!``.

``--baseline REV``: the same cases on the source tree of git revision ``REV`` (its packages, recipes and
``results/oxrl_core``, read with ``git archive`` into a temporary directory that each of its commands
runs in: ``python -m`` puts that directory first on ``sys.path``, so the installed entry points load its
modules), in the same repeats, side by side with the working tree. Quote the ratios; absolute times
depend on load.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {
    **{k: v for k, v in os.environ.items() if k not in ("OXBENCH_PLUGINS", "PYTHONPATH")},
    "COLUMNS": "200",
}
HEAVY = ("torch", "transformers", "deepspeed", "datasets", "lm_eval")
BASE = "{train: {batch_size: 4, max_steps: 1}, eval: {n_test: 4, n_ood: 4, k: 0}}"


def grid(axes: str = "{method: [sft], seed: [0]}", base: str = BASE, extra: str = "") -> str:
    """A small grid file's text (tiny-xs, the default model)."""
    return f"name: g\nbase: {base}\naxes: {axes}\n{extra}"


# label -> (argv after ``oxbench``, {file name: text} written into the case directory, an error case)
CASES: dict[str, tuple[list[str], dict[str, str], bool]] = {
    "--help": (["--help"], {}, False),
    "losses": (["losses"], {}, False),
    "losses --json": (["losses", "--json"], {}, False),
    "plan quickstart (6 cells)": (["run", "--grid", "recipes/quickstart.yaml", "--plan"], {}, False),
    "plan oxrl_core (54 cells, committed)": (
        ["run", "--grid", "recipes/oxrl_core.yaml", "--out", "results", "--plan"],
        {},
        False,
    ),
    "error: unknown loss": (
        ["run", "--grid", "{d}/g.yaml", "--plan"],
        {"g.yaml": grid("{method: [dpoo]}")},
        True,
    ),
    "error: unknown hyper-parameter": (
        ["run", "--grid", "{d}/g.yaml", "--plan"],
        {"g.yaml": grid("{method: [dpo], loss.betta: [0.1]}")},
        True,
    ),
    "error: hyper-parameter type": (
        ["run", "--grid", "{d}/g.yaml", "--plan"],
        {"g.yaml": grid("{method: [dpo]}", extra="methods: {dpo: {loss: {beta: high}}}\n")},
        True,
    ),
    "error: value out of range": (
        ["run", "--grid", "{d}/g.yaml", "--plan"],
        {"g.yaml": grid(base="{train: {lr: -1.0e-3}}")},
        True,
    ),
    "error: NaN": (
        ["run", "--grid", "{d}/g.yaml", "--plan"],
        {"g.yaml": grid(base="{train: {lr: .nan}}")},
        True,
    ),
    "error: unknown key": (
        ["run", "--grid", "{d}/g.yaml", "--plan"],
        {"g.yaml": grid(base="{train: {lerning_rate: 1.0}}")},
        True,
    ),
    "error: missing file": (["run", "--grid", "{d}/nope.yaml", "--plan"], {}, True),
    "error: malformed YAML": (
        ["run", "--grid", "{d}/g.yaml", "--plan"],
        {"g.yaml": "name: g\naxes: [unclosed\n"},
        True,
    ),
    "error: unknown model (--config)": (
        ["run", "--config", "{d}/c.yaml", "--plan"],
        {"c.yaml": "method: sft\nmodel: {name: tiny-xl}\n"},
        True,
    ),
    "error: --workers 0": (
        ["run", "--grid", "recipes/quickstart.yaml", "--plan", "--workers", "0"],
        {},
        True,
    ),
    # issue 37's kinds
    "error: a YAML boolean for a number": (
        ["run", "--grid", "{d}/g.yaml", "--plan"],
        {"g.yaml": grid("{method: [sft], train.lr: [yes]}")},
        True,
    ),
    "error: a model path with no model": (
        ["run", "--config", "{d}/c.yaml", "--plan"],
        {"c.yaml": "method: sft\nmodel: {name: /etc}\n"},
        True,
    ),
    "error: a YAML key that is not a name": (
        ["run", "--grid", "{d}/g.yaml", "--plan"],
        {"g.yaml": "1: g\nname: g\n"},
        True,
    ),
    "plan of 10^6 cells (a summary)": (
        ["run", "--grid", "{d}/g.yaml", "--plan"],
        {
            "g.yaml": grid(
                "{method: [sft, dpo, sgrpo, grpo, kto, ipo, simpo, orpo, cpo, rloo], seed: [0,1,2,3,4,5,6,7,8,9], "
                "train.lr: [1.0e-4, 2.0e-4, 3.0e-4, 4.0e-4, 5.0e-4, 6.0e-4, 7.0e-4, 8.0e-4, 9.0e-4, 1.0e-3], "
                "train.max_steps: [1,2,3,4,5,6,7,8,9,10], train.warmup_ratio: [0.0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9], "
                "data.n_train: [8,16,24,32,40,48,56,64,72,80]}"
            )
        },
        False,
    ),
}


def source_tree(rev: str, into: Path) -> Path:
    """What the cases read of git revision ``rev`` (with ``git archive``; the repository is not touched)."""
    paths = ["oxbench", "oxbench_cli", "losses", "analysis", "recipes", "results/oxrl_core"]
    tar = subprocess.run(["git", "archive", rev, *paths], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(into, filter="data")
    probe = "import losses, oxbench_cli; print(oxbench_cli.__file__, losses.__file__)"
    loaded = subprocess.run([sys.executable, "-c", probe], cwd=into, env=ENV, capture_output=True, text=True)
    if not all(Path(f).is_relative_to(into) for f in loaded.stdout.split()):
        sys.exit(f"{rev}: its tree does not load its own modules ({loaded.stdout or loaded.stderr})")
    return into


def case_dir(label: str, d: Path) -> Path:
    """The case's own directory under ``d``, holding its files."""
    return d / f"case{list(CASES).index(label)}"


def command(label: str, d: Path) -> list[str]:
    where = str(case_dir(label, d))
    return [sys.executable, "-m", "oxbench_cli", *(a.replace("{d}", where) for a in CASES[label][0])]


def timed(label: str, d: Path, tree: Path) -> tuple[float, int]:
    """One run of the case in ``tree``: (seconds, exit code)."""
    t0 = time.perf_counter()
    proc = subprocess.run(command(label, d), cwd=tree, env=ENV, capture_output=True, timeout=600)
    return time.perf_counter() - t0, proc.returncode


def heavy_imports(label: str, d: Path, tree: Path) -> list[str]:
    """The heavy libraries the case imports in ``tree`` (``-X importtime``'s top-level lines)."""
    argv = command(label, d)
    proc = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], cwd=tree, env=ENV, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    return [m for m in HEAVY if re.search(rf"\|\s+{m}$", proc.stderr, re.M)]


def measure(trees: dict[str, Path], repeats: int, d: Path) -> dict[tuple[str, str], dict]:
    """(tree, case) -> its times, exit codes and heavy imports, over ``repeats`` rotated rounds."""
    labels = list(CASES)
    out = {(t, c): {"s": [], "rc": set()} for t in trees for c in labels}
    for r in range(repeats):
        for c in labels[r % len(labels) :] + labels[: r % len(labels)]:
            for t, tree in trees.items():
                s, rc = timed(c, d, tree)
                out[t, c]["s"].append(s)
                out[t, c]["rc"].add(rc)
    for (t, c), row in out.items():
        row["heavy"] = heavy_imports(c, d, trees[t])
    return out


def table(results: dict[tuple[str, str], dict], trees: list[str]) -> str:
    """A markdown table: per case, each tree's median [min, max] seconds, exit code and heavy imports."""
    head = "| case | " + " | ".join(f"{t}: median s [min, max] | {t}: exit, imports" for t in trees) + " |"
    rows = [head, "|---|" + "---|---|" * len(trees)]
    for c, (_, _, error) in CASES.items():
        cells = []
        for t in trees:
            row = results[t, c]
            s, codes = row["s"], sorted(row["rc"])
            bad = "!" if error and codes != [2] else ""
            cells += [f"{statistics.median(s):.2f} [{min(s):.2f}, {max(s):.2f}]",
                      f"{','.join(map(str, codes))}{bad}, {' '.join(row['heavy']) or 'none'}"]  # fmt: skip
        rows.append(f"| {c} | " + " | ".join(cells) + " |")
    errors = [c for c, (_, _, e) in CASES.items() if e]
    for t in trees:
        med = statistics.median(statistics.median(results[t, c]["s"]) for c in errors)
        rows.append(f"\n{t}: median over the {len(errors)} error cases {med:.2f} s")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--baseline", help="a git revision to time side by side with the working tree")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "cases"
        for label, (_, files, _) in CASES.items():
            case_dir(label, d).mkdir(parents=True)
            for name, text in files.items():
                (case_dir(label, d) / name).write_text(text)
        trees: dict[str, Path] = {}
        if args.baseline:
            trees[args.baseline] = source_tree(args.baseline, Path(tmp) / "baseline")
        trees["working tree"] = ROOT
        results = measure(trees, args.repeats, d)
    print(f"{args.repeats} repeats, {os.cpu_count()} CPUs, python {sys.version.split()[0]}")
    print(table(results, list(trees)))


if __name__ == "__main__":
    main()
