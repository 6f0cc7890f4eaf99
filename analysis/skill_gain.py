"""Does an arm raise skill over its base? From a grid's records only (issues 27.4 and 40).

    python -m analysis.skill_gain results/oxrl_skill [--metric accuracy_verified_flexible]
        [--control results/oxrl_skill_control] [--base-prefix results/isocompute_flexible]

Unit: seeds × problems (:mod:`analysis.twoway`: seeds and test problems crossed random factors), with
the seed-only numbers beside, labelled. Per arm (every axis but the seed; arms whose records repeat
each other merged by :func:`analysis.units.duplicate_arms`' rule), against a reference:

* the base, where its metric fixes its per-problem outcomes (0 or 1: :func:`analysis.crossed.fixed_base`);
  otherwise the records hold the base's metric only, not its per-problem outcomes, so the paired
  two-way test is against ``--control`` (a random-reward grid on the same test set: the policy trained
  by the same steps without the reward's information), and without a control no two-way test is made
  (the arm's two-way interval is printed beside the base's value);
* Holm over the arms; the target: at least one arm with a mean gain of ≥ 5 points, two-way p < 0.01
  after Holm, over ≥ 3 seeds; "≥ 5 shown" when the interval's lower end is 5 points or more.

Beside the two-way test: each seed's change over the base and the seed-only one-sample t-test against
the base's value (unit: seeds). Then every run pooled (the allocation a nuisance). For an arith test set
(:mod:`analysis.arith_records`): accuracy by operand range (up to the largest operand the base saw in
pre-training, and beyond), each arm against the control per range; how often an arm's seeds give the
same final answer as each other and as the control's runs (the base's answers are not recorded, so an
answer-change rate against the base is not computable: half an arm's between-seed disagreement is a
lower bound on it). ``--base-prefix``: another grid of the same base and test set with fewer test
problems gives the base's mean on the first problems, so the gain splits into the first problems and
the rest (seed means; no interval, the base's per-problem outcomes being unknown).
"""

from __future__ import annotations

import argparse
import itertools
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from analysis import arith_records as ar
from analysis import load_runs
from analysis.crossed import BOTH, fixed_base, outcome_matrix
from analysis.stats import adjust_pvalues, by_arm
from analysis.twoway import two_way_difference, two_way_mean
from analysis.units import drop_duplicate_arms, duplicate_arms, duplicate_note, merged_arms, merged_label

OUTCOME = {"accuracy": "correct", "accuracy_flexible": "correct_flexible"}
TARGET = 5.0  # points (issue 27.4)
CONTROL_GRADERS = ("random", "shuffled-")  # online.reward_grader values that make an arm a control
NUMBER_ANSWERS = ("arith", "gsm8k")  # tasks whose answer is the completion's last number (the answer tables)
RATE = r"(?:base_lr|lr)=\S+"  # an arm label's learning rate (a matched control runs at another)
MOVES_CUTOFFS = (0.7, 0.8, 0.9)  # "moves the policy as much" (recipes/oxrl_skill_fresh.yaml: 0.8)


def finished(root: Path) -> pd.DataFrame:
    """The finished runs of ``root`` (:func:`analysis.load_runs`), ``method`` set to each run's arm."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = load_runs(root)
    return by_arm(runs[runs["status"] == "finished"]).sort_values("seed", ignore_index=True)


def outcomes(runs: pd.DataFrame, metric: str, base_of: pd.DataFrame | None = None) -> pd.DataFrame:
    """The per-problem test outcomes of ``runs`` (:func:`analysis.arith_records.load_completions`) and,
    where ``base_of``'s runs recorded it, the base's (run_id :data:`~analysis.arith_records.BASE`), with
    ``verified_flexible`` recovered when ``metric`` needs it; exits when the recovery does not give
    some run's (or the base's) recorded metric back."""
    base = ar.load_base_completions(base_of) if base_of is not None else ar.load_completions(runs.iloc[:0])
    table = pd.concat([ar.load_completions(runs), base], ignore_index=True)
    if metric == "accuracy_verified_flexible" and len(table):
        n_ops = ar.task_config(runs)["task"].get("n_ops")
        table = ar.with_verified_flexible(table, ar.gold_workings(table, n_ops))
        recorded = runs[["run_id", metric]]
        if len(base):
            base_value = float(base_of[f"base_{metric}"].iloc[0])
            recorded = pd.concat([recorded, pd.DataFrame({"run_id": [ar.BASE], metric: [base_value]})])
        bad = ar.verified_flexible_mismatches(table, recorded)
        if bad:
            raise SystemExit(f"recovered verified-flexible outcomes miss the recorded metric of {bad}")
    return table


def base_matrix(table: pd.DataFrame, metric: str) -> pd.DataFrame | None:
    """The base's per-problem outcomes as the (2, problems) table a deterministic reference takes in
    :func:`analysis.twoway.two_way_difference` (no seed or residual variance); None when not recorded."""
    y = outcome_matrix(pd.DataFrame({"run_id": [ar.BASE], "seed": [0]}), table, metric)
    return None if y is None else pd.concat([y, y])


def gains(runs: pd.DataFrame, metric: str) -> dict[str, list[float]]:
    """Arm -> its runs' changes over the base, in points, in seed order (seed-only)."""
    delta = 100 * (runs[metric] - runs[f"base_{metric}"])
    return {arm: [float(d) for d in g] for arm, g in delta.groupby(runs["method"], sort=False)}


def reference(runs, control, table, metric: str) -> tuple[pd.DataFrame | None, str]:
    """The paired reference of every arm (module doc), a (runs, problems) table, and its name; (None,
    why) when there is none."""
    recorded = base_matrix(table, metric)
    if recorded is not None:
        base = float(recorded.to_numpy().mean())
        return recorded, f"the base ({100 * base:.1f}%; its per-problem outcomes, base_eval.jsonl)"
    base = float(runs[f"base_{metric}"].iloc[0])
    ids = sorted(table.loc[table["run_id"] == runs["run_id"].iloc[0], "id"].unique())
    fixed = fixed_base(base, len(ids))
    if fixed is not None:
        name = f"the base ({100 * base:.1f}%: every problem {'right' if base else 'wrong'})"
        return pd.DataFrame(fixed, columns=ids), name
    y = outcome_matrix(control, table, metric) if control is not None else None
    if y is not None:
        return y, f"the random-reward control ({len(control)} runs)"
    return None, "none: the base's per-problem outcomes are not recorded and no --control was given"


def versus(y: pd.DataFrame, ref: pd.DataFrame, columns=None) -> dict:
    """:func:`analysis.twoway.two_way_difference` of ``y`` against ``ref`` on the problems both hold
    (and ``columns``, if given), in points."""
    common = y.columns.intersection(ref.columns)
    common = common if columns is None else common.intersection(columns)
    d = two_way_difference(y[common].to_numpy(), ref[common].to_numpy())
    return {
        "delta": 100 * d["delta"],
        "lo": 100 * d["ci_low"],
        "hi": 100 * d["ci_high"],
        "p": d["p"],
        "seed_only_p": d["seed_only_p"],
    }


def arm_table(runs, table, metric: str, ref) -> list[dict]:
    """Per arm: seed-only gains and one-sample p; the two-way test against ``ref``; Holm over arms."""
    rows = []
    for arm, seeds in gains(runs, metric).items():
        y = outcome_matrix(runs[runs["method"] == arm], table, metric)
        row = {"arm": arm, "seeds": seeds, "mean": float(np.mean(seeds)), "y": y}
        row["seed_p"] = float(stats.ttest_1samp(seeds, 0).pvalue) if len(seeds) > 1 else np.nan
        if y is not None and ref is not None and len(y) > 1:
            row.update(versus(y, ref))
        elif y is not None and len(y) > 1:
            m = two_way_mean(y.to_numpy())
            row.update(acc_lo=100 * m["ci_low"], acc_hi=100 * m["ci_high"], p=np.nan)
        rows.append(row)
    for key in ("p", "seed_p"):
        for r, adj in zip(rows, adjust_pvalues([r.get(key, np.nan) for r in rows], "holm")):
            r[f"{key}_holm"] = float(adj)
    return sorted(rows, key=lambda r: -r["mean"])


def _verdict(r: dict) -> str:
    """The target: a mean gain over the base of ≥ 5 points, two-way p < 0.01 after Holm, ≥ 3 seeds; and
    whether the interval's lower end reaches 5."""
    if "delta" not in r:
        return "untested (no paired reference)"
    met = r["mean"] >= TARGET and r["p_holm"] < 0.01 and len(r["seeds"]) >= 3
    return f"{'met' if met else 'no'}; ≥ {TARGET:g} {'shown' if r['lo'] >= TARGET else 'not shown'}"


def print_leaderboard(rows: list[dict], ref_name: str, merged: dict) -> None:
    print(
        f"two-way against {ref_name}; unit: {BOTH} (Holm over {len(rows)} arm{'s' * (len(rows) > 1)}); "
        "seed-only beside "
        "(one-sample t of the per-seed changes against 0; unit: seeds)"
    )
    print(
        "| arm | per seed (points over the base) | mean | Δ vs reference [95% CI] (seeds × problems) | p | "
        f"p (Holm) | seed-only p | seed-only p (Holm) | target (mean ≥ {TARGET:g}, Holm p < 0.01, ≥ 3 seeds) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        test = (
            f"{r['delta']:+.1f} [{r['lo']:+.1f}, {r['hi']:+.1f}]"
            if "delta" in r
            else f"accuracy [{r['acc_lo']:.1f}, {r['acc_hi']:.1f}]"
            if "acc_lo" in r
            else "–"
        )
        print(
            f"| {merged_label(r['arm'], merged)} | {', '.join(f'{d:+.1f}' for d in r['seeds'])} | "
            f"{r['mean']:+.2f} | {test} | {r['p']:.2g} | {r['p_holm']:.2g} | {r['seed_p']:.2g} | "
            f"{r['seed_p_holm']:.2g} | {_verdict(r)} |"
        )


def print_pooled(rows: list[dict], ref) -> None:
    """Every run as one arm (the arms a nuisance): two-way against ``ref``, the runs' t-test beside."""
    pooled = [d for r in rows for d in r["seeds"]]
    ys = [r["y"] for r in rows if r["y"] is not None]
    text = f"all {len(pooled)} runs pooled: {np.mean(pooled):+.2f} ± {np.std(pooled, ddof=1):.2f} points"
    if ref is not None and len(ys) == len(rows):
        d = versus(pd.concat(ys).dropna(axis=1), ref)
        text += (
            f"; against the reference {d['delta']:+.2f} [{d['lo']:+.2f}, {d['hi']:+.2f}], p = {d['p']:.2g} "
            "(unit: runs × problems)"
        )
    print(f"\n{text}; seed-only: p = {stats.ttest_1samp(pooled, 0).pvalue:.2g} (unit: runs)")


def _cell(y: pd.DataFrame, ids) -> str:
    """The two-way interval of ``y``'s accuracy on the problems ``ids``, in %."""
    sub = y[y.columns.intersection(ids)].to_numpy()
    m = two_way_mean(sub)
    return f"{100 * m['mean']:.1f} [{100 * m['ci_low']:.1f}, {100 * m['ci_high']:.1f}]"


def print_by_range(arms: dict[str, pd.DataFrame], ref: tuple, ops: pd.DataFrame, trained: int) -> None:
    """Accuracy by operand range (two-way intervals) and each arm against ``ref`` ((name, outcomes):
    the base where recorded, else the control) per range."""
    ref_name, ref_y = ref
    known = ops[ops["source"].notna()]
    ranges = {
        f"≤ {trained}": known[known["max_op"] <= trained]["id"],
        f"> {trained}": known[known["max_op"] > trained]["id"],
    }
    print(
        f"\nby operand range (the base pre-trained on operands ≤ {trained}; unit: {BOTH}); operands of "
        f"{int((ops['source'] == 'working').sum())} problems from their working, "
        f"{int((ops['source'] == 'copied').sum())} copied from the completions, "
        f"{int(ops['source'].isna().sum())} unknown (left out)"
        + ("" if ref_name == "base" else "; the base's accuracy per range is not recorded")
    )
    head = " | ".join(
        f"{k} ({len(v)} problems): accuracy [95% CI] | Δ vs {ref_name} [95% CI], p" for k, v in ranges.items()
    )
    print(f"| arm | {head} |\n|---|{'---|' * 2 * len(ranges)}")
    for arm, y in arms.items():
        cells = []
        for ids in ranges.values():
            cells.append(_cell(y, ids))
            if ref_y is not None and arm != ref_name:
                d = versus(y, ref_y, ids)
                cells.append(f"{d['delta']:+.1f} [{d['lo']:+.1f}, {d['hi']:+.1f}], p = {d['p']:.2g}")
            else:
                cells.append("–")
        print(f"| {arm} | {' | '.join(cells)} |")


def _agreement(a: np.ndarray, b: np.ndarray | None = None) -> float:
    """Mean share of problems on which two runs give the same final answer: over the pairs of rows of
    ``a``, or over every row of ``a`` against every row of ``b``."""
    pairs = itertools.combinations(a, 2) if b is None else itertools.product(a, b)
    return float(np.mean([np.mean(x == y) for x, y in pairs]))


def changed_from_base(a: np.ndarray, base: np.ndarray) -> np.ndarray:
    """Per run (row of ``a``), the share of problems whose final answer differs from the base's."""
    return (a != base[0]).mean(axis=1)


def _changed_text(a: np.ndarray, base: np.ndarray | None, within: float) -> str:
    """An arm's change from the base: exact per run where the base's answers are recorded, else the
    lower bound from its between-seed disagreement."""
    if base is None:
        return f"≥ {50 * (1 - within):.1f}%"
    per_run = changed_from_base(a, base)
    return f"{100 * per_run.mean():.1f}% ({', '.join(f'{100 * c:.1f}' for c in per_run)})"


def print_answer_changes(answers: dict[str, np.ndarray], base: np.ndarray | None) -> None:
    """How far each arm's final answers move: between its own seeds, against the control's runs, and
    from the base's (exact, run by run, where the base's answers are recorded; else a lower bound)."""
    ctrl = answers.get("control")
    if base is None:
        print(
            "\nfinal answers (the last number of each greedy completion; unit: pairs of runs). The base's "
            "answers are not recorded: half an arm's between-seed disagreement is a lower bound on the share "
            "of answers each of its runs changed from the base (triangle inequality), and no upper bound follows"
        )
    else:
        print(
            "\nfinal answers (the last number of each greedy completion; unit: pairs of runs, and runs for the "
            "change from the base, whose answers are recorded: base_eval.jsonl)"
        )
    changed = "answers changed from the base " + ("(lower bound)" if base is None else "(mean; per run)")
    print(f"| arm | runs | same answer between its seeds | {changed} | same answer as the control's runs |")
    print("|---|---|---|---|---|")
    for arm, a in answers.items():
        within = _agreement(a) if len(a) > 1 else np.nan
        versus_ctrl = _agreement(a, ctrl) if ctrl is not None and arm != "control" else np.nan
        print(
            f"| {arm} | {len(a)} | {100 * within:.1f}% | {_changed_text(a, base, within)} | "
            + ("–" if np.isnan(versus_ctrl) else f"{100 * versus_ctrl:.1f}%")
            + " |"
        )


def print_prefix(
    arms: dict[str, pd.DataFrame], order: list[str], base: float, prefix: pd.DataFrame, metric: str
) -> None:
    """The gain on the first problems and on the rest, with the base's mean on the first problems from
    ``prefix`` (a grid of the same base and test set with fewer test problems); seed means, no interval."""
    n = int(prefix["n_test"].iloc[0])
    first_base = float(prefix[f"base_{metric}"].iloc[0])
    rest_base = (len(order) * base - n * first_base) / (len(order) - n)
    print(
        f"\nthe first {n} test problems and the last {len(order) - n} (the base: {100 * first_base:.1f}% and "
        f"{100 * rest_base:.1f}%, from the base's metric on {n} and on {len(order)} problems; descriptive, unit: "
        "seed means)"
    )
    print(f"| arm | gain on the first {n} | gain on the last {len(order) - n} |\n|---|---|---|")
    for arm, y in arms.items():
        first, rest = y[order[:n]].to_numpy().mean(), y[order[n:]].to_numpy().mean()
        print(f"| {arm} | {100 * (first - first_base):+.1f} | {100 * (rest - rest_base):+.1f} |")


def _answers(table: pd.DataFrame, runs: pd.DataFrame) -> np.ndarray:
    """(runs, problems) final answers of ``runs`` on the problems they all have."""
    answers = table.assign(answer=ar.final_answers(table).fillna(""))
    wide = answers[answers["run_id"].isin(runs["run_id"])].pivot(
        index="run_id", columns="id", values="answer"
    )
    return wide.dropna(axis=1).to_numpy(dtype=object)


def print_identical(runs: pd.DataFrame, dups: pd.DataFrame) -> None:
    """The rule's merged sets, and the near-identical pairs it keeps apart (≥ 95% on every seed)."""
    print("identical arms (merged in every table below):", duplicate_note(dups, merged=True) or "none")
    near = duplicate_arms(runs, min_agreement=0.95)
    near = near[~near["duplicate"].isin(dups["duplicate"])]
    for r in near.itertuples():
        print(
            f"near-identical, not merged (the rule asks ≥ 99% on every seed): {r.duplicate} and {r.kept} share "
            f"≥ {100 * r.min_agreement:.1f}% of test completions on each of {r.seeds} seeds"
        )


def is_control(arm: str) -> bool:
    """An arm trained on a reward that carries no signal about correctness (a control)."""
    return any(f"reward_grader={c}" in arm for c in CONTROL_GRADERS)


def real_twin(control: str, arms) -> str | None:
    """The arm a control shadows: the same label with a real reward, every other setting equal; failing
    that, the one real arm that differs only in its learning rate (a control matched on how far it moves
    the policy runs at a larger rate: recipes/oxrl_skill_matched_calibration.yaml)."""
    for strip in (re.compile(r" ?reward_grader=\S+"), re.compile(rf" ?(?:reward_grader=\S+|{RATE})")):
        twins = [a for a in arms if not is_control(a) and strip.sub("", a) == strip.sub("", control)]
        if len(twins) == 1:
            return twins[0]
    return None


def print_versus_controls(rows: list[dict], merged: dict) -> None:
    """Each real arm against each control arm of the grid (the same test problems): is the gain the
    reward's? Two-way (seeds × problems), Holm over the tests; seed-only (Welch) beside."""
    controls = [r for r in rows if is_control(r["arm"]) and r["y"] is not None]
    real = [r for r in rows if not is_control(r["arm"]) and r["y"] is not None]
    tests = [(a, c, versus(a["y"], c["y"])) for a in real for c in controls]
    if not tests:
        return
    holm = adjust_pvalues([t[2]["p"] for t in tests], "holm")
    print(
        f"\neach arm against each control of the grid (unit: {BOTH}; Holm over {len(tests)}; seed-only Welch beside)"
    )
    print("| arm | control | Δ [95% CI] | p | p (Holm) | seed-only p |\n|---|---|---|---|---|---|")
    for (a, c, d), h in zip(tests, holm):
        print(
            f"| {merged_label(a['arm'], merged)} | {merged_label(c['arm'], merged)} | {d['delta']:+.1f} "
            f"[{d['lo']:+.1f}, {d['hi']:+.1f}] | {d['p']:.2g} | {h:.2g} | {d['seed_only_p']:.2g} |"
        )


def print_moves_as_much(answers: dict[str, np.ndarray], base: np.ndarray) -> None:
    """Does each control move the policy as much as its real twin: the share of final answers each run
    changed from the base's (unit: runs), the ratio of the means, and a one-sided Welch test of the
    control being lower. "As much" at a cut-off c: ratio ≥ c and p ≥ 0.05 (recipes/oxrl_skill_fresh.yaml:
    c = 0.8, with 0.7 and 0.9 beside)."""
    pairs = [(c, real_twin(c, answers)) for c in answers if is_control(c)]
    pairs = [(c, t) for c, t in pairs if t is not None]
    if not pairs:
        return
    cuts = " | ".join(f"as much at {c:g}" for c in MOVES_CUTOFFS)
    print(
        "\ndoes a control move the policy as much as its real twin (answers changed from the base; unit: runs)"
    )
    print(f"| control | twin | control: changed | twin: changed | ratio | p (control lower) | {cuts} |")
    print(f"|---|---|---|---|---|---|{'---|' * len(MOVES_CUTOFFS)}")
    scaled: dict[str, float] = {}  # a calibration's ratios: controls at another rate than their twin's
    for c, t in pairs:
        a, b = changed_from_base(answers[c], base), changed_from_base(answers[t], base)
        ratio = float(a.mean() / b.mean()) if b.mean() > 0 else np.nan
        p = float(stats.ttest_ind(a, b, equal_var=False, alternative="less").pvalue)
        verdicts = " | ".join("yes" if ratio >= cut and p >= 0.05 else "no" for cut in MOVES_CUTOFFS)
        print(
            f"| {c} | {t} | {100 * a.mean():.1f}% | {100 * b.mean():.1f}% | {ratio:.2f} | {p:.2g} | {verdicts} |"
        )
        if _rate(c) != _rate(t):
            scaled[c] = ratio
    if len(scaled) > 1:  # a calibration: the same control at several rates
        pick = min(scaled, key=lambda c: abs(np.log(scaled[c])) if scaled[c] > 0 else np.inf)
        print(
            f"nearest its twin (|log ratio| smallest; the calibration's pick): {pick}, ratio {scaled[pick]:.2f}"
        )


def _rate(arm: str | None) -> str | None:
    """The learning-rate part of an arm's label (``base_lr=…`` or ``lr=…``), if any."""
    found = re.search(rf"\b{RATE}", arm or "")
    return found.group(0) if found else None


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--metric", default="accuracy_verified_flexible")
    ap.add_argument("--control", type=Path, help="a random-reward grid on the same test set")
    ap.add_argument("--base-prefix", type=Path, help="a grid of the same base with fewer test problems")
    ap.add_argument(
        "--also",
        type=Path,
        nargs="*",
        default=[],
        help="grids on the same test set whose "
        "completions help recover the problems' workings and operands (analysis.arith_records)",
    )
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    runs, control = finished(args.root), finished(args.control) if args.control else None
    both = pd.concat([runs, *([control] if control is not None else []), *map(finished, args.also)])
    config = ar.task_config(both)  # one test set, or a ValueError
    table = outcomes(both, args.metric, base_of=runs)
    dups = duplicate_arms(runs)
    once, merged = drop_duplicate_arms(runs, dups), merged_arms(dups)
    print(f"{args.root.name}: {args.metric}, change over the base in points; {len(runs)} runs")
    print_identical(runs, dups)
    ref, ref_name = reference(once, control, table, args.metric)
    rows = arm_table(once, table, args.metric, ref)
    print_leaderboard(rows, ref_name, merged)
    print_pooled(rows, ref)
    print_versus_controls(rows, merged)
    arms = {merged_label(r["arm"], merged): r["y"] for r in rows if r["y"] is not None}
    ctrl = outcome_matrix(control, table, args.metric) if control is not None else None
    if ctrl is not None:
        arms["control"] = ctrl
    base = base_matrix(table, args.metric)
    range_ref = ("base", base) if base is not None else ("control", ctrl)
    arith = config["task"]["name"] == "arith"
    trained = ar.trained_max_operand(config) if arith else None
    if arith and arms and trained < config["task"]["max_operand"]:
        gold = ar.gold_workings(table, config["task"].get("n_ops"))
        ops = ar.problem_operands(table, gold, config["task"]["max_operand"])
        print_by_range(arms, range_ref, ops, trained)
    if config["task"]["name"] in NUMBER_ANSWERS:
        print_answers(table, once, rows, merged, control)
    else:
        print(
            f"\nfinal answers: not compared ({config['task']['name']}'s answer is not the completion's last number)"
        )
    if args.base_prefix and arms:
        order = list(dict.fromkeys(table.loc[table["run_id"] == runs["run_id"].iloc[0], "id"]))
        base_value = float(runs[f"base_{args.metric}"].iloc[0])
        print_prefix(arms, order, base_value, finished(args.base_prefix), args.metric)


def print_answers(table: pd.DataFrame, once: pd.DataFrame, rows: list[dict], merged: dict, control) -> None:
    """The answer-change tables: every arm's, and whether each control moves the policy as much."""
    if not len(table):
        return
    groups = {merged_label(r["arm"], merged): once[once["method"] == r["arm"]] for r in rows}
    if control is not None:
        groups["control"] = control
    answers = {a: _answers(table, g) for a, g in groups.items()}
    has_base = bool((table["run_id"] == ar.BASE).any())
    base = _answers(table, pd.DataFrame({"run_id": [ar.BASE]})) if has_base else None
    print_answer_changes(answers, base)
    if base is not None:
        print_moves_as_much(answers, base)


if __name__ == "__main__":
    main()
