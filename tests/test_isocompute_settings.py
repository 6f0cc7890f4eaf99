"""Issue 14's settings: learning curves, difficulty subsets, the √B learning rate, budgeted grids and
the entropy term, each with its bad input."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
from pydantic import ValidationError

import losses
from losses.types import LossInputs
from oxbench.config import RunConfig
from oxbench.data import difficulty
from oxbench.grid.spec import Constraint, GridError, GridFile, expand
from oxbench.tasks import arith, load_task_split

# ------------------------------------------------------------------------------ learning rate


@pytest.mark.parametrize("rule,power", [("sqrt", 0.5), ("linear", 1.0)])
def test_lr_scaling_resolves_into_train_lr(rule, power):
    """B = B_p · n = 16 · 16 = 256 rollouts a step, anchored at 1e-6 for 1,024: sqrt gives
    1e-6 · (256/1024)^0.5 = 5e-7, linear 2.5e-7; the config (and so run.json) holds that LR."""
    cfg = RunConfig(method="sgrpo", online={"n": 16, "prompts_per_batch": 16},
                    train={"lr_scaling": {"rule": rule, "base_lr": 1e-6, "base_batch": 1024}})  # fmt: skip
    assert cfg.train.lr == pytest.approx(1e-6 * (256 / 1024) ** power)
    assert RunConfig(**cfg.model_dump()).run_id() == cfg.run_id()  # a record's config re-validates as itself


def test_lr_scaling_offline_counts_examples_per_step():
    cfg = RunConfig(method="dpo", train={"batch_size": 8, "grad_accum": 4,
                    "lr_scaling": {"rule": "sqrt", "base_lr": 1e-5, "base_batch": 8}})  # fmt: skip
    assert cfg.train.lr == pytest.approx(2e-5)


@pytest.mark.parametrize(
    "train,match",
    [
        ({"lr_scaling": {"rule": "sqrt"}}, "needs base_lr > 0"),
        ({"lr_scaling": {"rule": "sqrt", "base_lr": float("nan")}}, "finite number"),
        ({"lr": 1e-3, "lr_scaling": {"rule": "sqrt", "base_lr": 1e-6}}, "given beside train.lr_scaling"),
        ({"lr_scaling": {"rule": "cube", "base_lr": 1e-6}}, "rule"),
    ],
)
def test_lr_scaling_bad_input(train, match):
    with pytest.raises(ValidationError, match=match):
        RunConfig(method="sgrpo", train=train)


# -------------------------------------------------------------------------------- eval.every


def test_eval_every_bad_input():
    with pytest.raises(ValidationError, match="eval.every 100000 is larger than the run's 1280 rollouts"):
        RunConfig(method="sgrpo", eval={"every": 100_000})
    with pytest.raises(ValidationError, match="needs an online method"):
        RunConfig(method="dpo", eval={"every": 10})
    with pytest.raises(ValidationError, match="every must be >= 1"):
        RunConfig(method="sgrpo", eval={"every": 0})


def test_arith_validation_split_is_disjoint_from_every_prompt_and_the_test_split():
    val = load_task_split({"name": "arith", "n_ops": 2, "max_operand": 40}, "validation", n=300)
    pool = arith.generate("train", None, n_ops=2, max_operand=40)  # every online prompt set is a prefix
    test = arith.generate("test", 1000, n_ops=2, max_operand=40)
    answers = {r["answer"] for r in val}
    assert len(answers) == 300
    assert not answers & {r["answer"] for r in pool} and not answers & {r["answer"] for r in test}


def test_gsm8k_validation_split_is_the_end_of_the_train_file(tmp_path):
    import json

    lines = [{"question": f"q{i}", "answer": f"w\n#### {i}"} for i in range(10)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines[:2]))
    val = load_task_split({"name": "gsm8k", "path": str(tmp_path)}, "validation", n=3)
    assert [r["question"] for r in val] == ["q7", "q8", "q9"]

    from oxbench.data.selection import online_prompts

    cfg = RunConfig(method="sgrpo", task={"name": "gsm8k", "path": str(tmp_path)},
                    online={"rounds": 1, "n": 2, "prompts_per_batch": 2}, eval={"every": 2, "n_val": 3})  # fmt: skip
    assert [r["question"] for r in online_prompts(cfg)] == [f"q{i}" for i in range(7)]


# --------------------------------------------------------------------------------- subsets


def rows(n):
    return [{"id": f"p{i}", "question": "q", "answer": "#### 1"} for i in range(n)]


def test_subset_bins_follow_the_paper():
    """k = 16: easy is avg@16 in [0.3, 0.6] (5..9 right), hard [0, 1/16] (0 or 1), extremely hard 0."""
    correct = {f"p{i}": i for i in range(17)}
    pick = {
        name: [r["id"] for r in difficulty.select(rows(17), correct, name, 16)]
        for name in ("easy", "hard", "extremely_hard")
    }
    assert pick == {"easy": ["p5", "p6", "p7", "p8", "p9"], "hard": ["p0", "p1"], "extremely_hard": ["p0"]}


def test_subset_mixture_keeps_its_shares():
    """40 easy and 10 hard problems at {easy: 0.8, hard: 0.2}: all 50 fit the shares exactly; at
    {easy: 0.5, hard: 0.5} the hard bin limits the total to 20 (10 + 10)."""
    correct = {f"p{i}": (6 if i < 40 else 0) for i in range(50)}
    mixed = difficulty.select(rows(50), correct, {"easy": 0.8, "hard": 0.2}, 16)
    assert len(mixed) == 50
    half = difficulty.select(rows(50), correct, {"easy": 0.5, "hard": 0.5}, 16)
    assert sum(correct[r["id"]] == 0 for r in half) == 10 and len(half) == 20


def test_subset_that_selects_nothing_names_the_key():
    with pytest.raises(difficulty.SubsetError, match="data.subset 'easy' selects no problems of 3"):
        difficulty.select(rows(3), {"p0": 0, "p1": 0, "p2": 16}, "easy", 16)


@pytest.mark.parametrize(
    "subset,match",
    [
        ("eazy", "did you mean 'easy'"),
        ({"easy": 0.5, "hard": 0.4}, "sum to 1"),
        ({"hard": -1.0, "easy": 2.0}, "> 0"),
    ],
)
def test_subset_bad_input(subset, match):
    with pytest.raises(ValidationError, match=match):
        RunConfig(method="sgrpo", data={"subset": subset})


def test_difficulty_is_measured_once_and_cached(micro_model_dir):
    """The base's per-problem counts of right samples (0..k), then read back from the cache."""
    from oxbench.models.loading import load_model

    cfg = RunConfig(method="sgrpo", model={"name": micro_model_dir}, data={"difficulty_k": 4},
                    online={"max_new_tokens": 6, "n_prompts": 6})  # fmt: skip
    model, tok = load_model(micro_model_dir, cfg, init_seed=0)
    probs = rows(6)
    first = difficulty.measure(model, tok, probs, cfg, {"model": "micro"}, verbose=False)
    assert set(first) == {r["id"] for r in probs} and all(0 <= c <= 4 for c in first.values())
    assert difficulty.difficulty_path(cfg, {"model": "micro"}).exists()
    assert difficulty.measure(None, None, probs, cfg, {"model": "micro"}) == first  # no model needed now


# ------------------------------------------------------------------------------ budget grids


def budget_grid(**budget) -> GridFile:
    return GridFile(name="b", budget=budget, base={"method": "sgrpo", "train": {"batch_size": 2}},
                    axes={"online.n": [2, 8, 32], "online.prompts_per_batch": [2, 8]})  # fmt: skip


def test_budget_sets_rounds_and_constraints_drop_cells():
    cells = expand(budget_grid(rollouts=1024, constraints=["B <= 64", "B_p * n * M == C"]))
    got = sorted((c.online.n, c.online.prompts_per_batch, c.online.rounds) for c in cells)
    assert got == [(2, 2, 256), (2, 8, 64), (8, 2, 64), (8, 8, 16), (32, 2, 16)]  # (32, 8): B = 256 > 64
    assert all(c.online.rollouts() == 1024 for c in cells)


def test_budget_below_one_batch_is_an_error_unless_a_constraint_drops_the_cell():
    with pytest.raises(GridError, match=r"field 'budget.rollouts': 100 is smaller than one batch .* = 256"):
        expand(budget_grid(rollouts=100, constraints=["B >= 128"]))
    assert len(expand(budget_grid(rollouts=100, constraints=["B <= 64"]))) == 5  # B 4, 16, 16, 64, 64


@pytest.mark.parametrize(
    "text,match",
    [
        ("__import__('os').system('true')", "only numbers, names and arithmetic"),
        ("B <=", "cannot parse"),
        ("bogus < 3", "unknown name 'bogus'"),
        ("n.real < 3", "unknown name 'n.real'"),
        ("(lambda: 1)() < 2", "only numbers"),
    ],
)
def test_constraints_are_parsed_never_evaluated(text, match):
    with pytest.raises(GridError, match=match):
        Constraint(text, "g.yaml: budget.constraints")


def test_constraint_arithmetic_by_hand():
    """n = 8, B_p = 4, M = 20: B = 32, C = 640; 2 ** 5 == B, B // 3 == 10, not (C > 640)."""
    cfg = RunConfig(method="sgrpo", online={"n": 8, "prompts_per_batch": 4, "rounds": 20})
    for text in (
        "2 ** 5 == B",
        "B // 3 == 10",
        "not C > 640",
        "online.n == 8 and train.batch_size >= 1",
        "-n < 0",
    ):
        assert Constraint(text, "w").holds(cfg), text
    assert not Constraint("B > 32 or M < 20", "w").holds(cfg)


def test_cli_one_line_error_for_a_bad_constraint(tmp_path):
    grid = tmp_path / "g.yaml"
    grid.write_text("name: g\nbudget: {rollouts: 64, constraints: ['open(1)']}\nbase: {method: sgrpo}\n")
    proc = subprocess.run([sys.executable, "-m", "oxbench_cli", "run", "--grid", str(grid), "--plan"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "budget.constraints" in lines[0] and "open(1)" in lines[0]


# ---------------------------------------------------------------------------------- entropy


def entropy_inputs(entropy):
    """Two rollouts of one group, rewards 1 and 0, two response tokens each, on-policy."""
    logp = torch.tensor([[-0.5, -1.0], [-2.0, -0.1]], requires_grad=True)
    return LossInputs(token_logps=logp, mask=torch.ones(2, 2), rewards=torch.tensor([1.0, 0.0]),
                      group_ids=torch.tensor([0, 0]), token_entropy=entropy)  # fmt: skip


@pytest.mark.parametrize("method", ["sgrpo", "grpo", "dr_grpo", "dapo", "gspo", "cispo"])
def test_entropy_term_by_hand(method):
    """Token entropies H = [[1, 2], [3, 4]], coef 0.1 (grpo with its KL off). sgrpo, dapo and cispo average the 4 tokens:
    −0.1 · 2.5 = −0.25; grpo and gspo average each response then the two: −0.1 · (1.5 + 3.5)/2 = −0.25;
    dr_grpo sums over tokens and divides by G · L_max = 2 · 2: −0.1 · 10/4 = −0.25. So the loss
    moves by exactly −0.25 from the loss without the term, and coef 0 leaves it untouched."""
    spec = losses.get(method)
    h = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    extra = {"max_completion_length": 2} if method == "dr_grpo" else {"beta": 0.0} if method == "grpo" else {}
    base = spec(entropy_inputs(None), **extra).loss
    with_term = spec(entropy_inputs(h), entropy_coef=0.1, **extra).loss
    assert float((with_term - base).detach()) == pytest.approx(-0.25, abs=1e-6)
    assert torch.equal(spec(entropy_inputs(h), entropy_coef=0.0, **extra).loss, base)
    assert spec.uses_entropy(spec.resolve_hparams({"entropy_coef": 0.1}))
    assert not spec.uses_entropy(spec.resolve_hparams())


def test_entropy_coef_without_entropies_names_the_field():
    with pytest.raises(ValueError, match="token_entropy"):
        losses.get("sgrpo")(entropy_inputs(None), entropy_coef=0.1)


def test_entropy_gradient_raises_entropy():
    """One step down the loss −H of a softmax raises H (the term's gradient has the right sign)."""
    logits = torch.tensor([[2.0, 0.0, -1.0]], requires_grad=True)
    logp = logits.log_softmax(-1)
    h = -(logp.exp() * logp).sum(-1, keepdim=True)
    inputs = LossInputs(token_logps=logp[:, :1], mask=torch.ones(1, 1), rewards=torch.tensor([1.0]),
                        group_ids=torch.tensor([0]), token_entropy=h)  # fmt: skip
    losses.get("sgrpo")(inputs, entropy_coef=1.0).loss.backward()
    with torch.no_grad():
        new = (logits - 0.1 * logits.grad).log_softmax(-1)
        assert float(-(new.exp() * new).sum()) > float(h) + 1e-4
    assert math.isfinite(float(logits.grad.abs().sum()))


def test_warmup_steps_fix_the_warmup_whatever_the_run_length():
    """The paper warms up for 10 steps then holds the LR: at 100 and at 1,000 steps, step 9 is at
    10/11 of the LR and step 10 at all of it."""
    from oxbench.engine.model import warmup_cosine

    for total in (100, 1000):
        f = warmup_cosine(total, 0.5, constant=True, warmup_steps=10)
        assert f(9) == pytest.approx(10 / 11) and f(10) == 1.0 and f(total - 1) == 1.0


def test_an_empty_subset_exits_2_and_a_training_failure_exits_1(tmp_path, monkeypatch):
    """Whether data.subset selects anything is known once the base's difficulty is measured; the
    cell then fails in one line naming the key, and the command exits 2 (bad input), not 1."""
    from typer.testing import CliRunner

    import oxbench.grid.cell
    from oxbench_cli import app

    cfg = tmp_path / "c.yaml"
    cfg.write_text("method: sgrpo\ndata: {subset: easy}\n")
    for error, code in (
        ("SubsetError: data.subset 'easy' selects no problems of 3", 2),
        ("NonFiniteLoss: nan", 1),
    ):
        monkeypatch.setattr(
            oxbench.grid.cell,  # what run --config calls, under the run's lock
            "run_cell",
            lambda c, out, e=error, **_: {"run_id": "r", "status": "failed", "error": e},
        )
        res = CliRunner().invoke(app, ["run", "--config", str(cfg), "--out", str(tmp_path)])
        assert res.exit_code == code, res.output


def test_variants_cross_the_axes_as_bundles():
    """Two bundles x 2 lags x 2 seeds = 8 cells; the bundle's keys join the arm, so the coupled and the
    decoupled + ESS-LR cells are different arms and seeds pool only within one."""
    g = GridFile(name="v", base={"method": "sgrpo", "online": {"source": "delayed"}},
                 variants=[{"loss.is_correction": "none"}, {"loss.is_correction": "decoupled", "online.ess_lr": "sqrt"}],
                 axes={"online.staleness": [0, 2], "seed": [0, 1]})  # fmt: skip
    cells = expand(g)
    assert len(cells) == 8 and cells[0].arm_keys == [
        "online.staleness",
        "loss.is_correction",
        "online.ess_lr",
    ]
    arms = {tuple(sorted(c.arm().items())) for c in cells}
    assert len(arms) == 4  # 2 bundles x 2 lags
    with pytest.raises(GridError, match="unknown axis 'online.stalenes'"):
        expand(GridFile(name="v", base={"method": "sgrpo"}, variants=[{"online.stalenes": 1}, {}]))


def test_random_reward_is_a_fair_coin_unrelated_to_correctness():
    from oxbench.tasks.rewards import random_reward, reward_function

    flips = [random_reward(f"answer {i}", "#### 3") for i in range(4000)]
    assert 0.46 < sum(flips) / len(flips) < 0.54
    assert random_reward("#### 3", "#### 3") == random_reward(
        "#### 3", "#### 3"
    )  # the same text, the same reward
    assert reward_function("flexible")("The answer is 3.", "#### 3") == 1.0
    assert reward_function("strict")("The answer is 3.", "#### 3") == 0.0


def test_shuffled_reward_keeps_each_group_s_rewards_and_drops_which_completion_earns_them():
    """The shuffled control: a group's rewards are the grader's, permuted, so the group's mean and
    spread (and its advantages' size) stay and the link to the completions goes."""
    from oxbench.tasks.rewards import group_rewards, reward_function

    shuffled, real = reward_function("shuffled-flexible"), reward_function("flexible")
    agree, total = 0, 0
    for g in range(300):
        texts = [f"The answer is {(g + i) % 5}." for i in range(8)]
        want = group_rewards(real, texts, "#### 2")
        got = group_rewards(shuffled, texts, "#### 2")
        assert sorted(got) == sorted(want) and got == group_rewards(shuffled, texts, "#### 2")
        agree += sum(a == b for a, b, w in zip(got, want, want) if w == 1.0)
        total += sum(want)
    assert total > 300 and agree / total < 0.45  # a correct completion keeps its 1 about 1 time in 4 here
    assert group_rewards(real, ["#### 2", "#### 3"], "#### 2") == [1.0, 0.0]
