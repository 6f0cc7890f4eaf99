"""The testbed's honest metrics and knobs: verified working, chance, answer styles, diagnostics."""

from __future__ import annotations

import io
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from pydantic import ValidationError

from oxbench.config import PretrainSettings, RunConfig, TaskConfig
from oxbench.engine.learner import token_entropy
from oxbench.engine.model import warmup_cosine
from oxbench.engine.sources.rollouts import rollout_stats
from oxbench.models.pretrain import PretrainConfig, styled_rows
from oxbench.tasks import arith, chance_accuracy, load_task_split, verify_working
from oxbench.tasks.grading import is_correct
from oxbench.utils import progress, progress_line

GOLD = "7 + 5 = 12\n12 - 3 = 9\n#### 9"


def test_restyle_keeps_the_working_and_changes_only_the_final_line():
    assert arith.restyle(GOLD, "sentence") == "7 + 5 = 12\n12 - 3 = 9\nThe answer is 9."
    assert arith.restyle(GOLD, "gsm8k") == GOLD
    s = arith.restyle(GOLD, "sentence")
    assert not is_correct(s, GOLD, "strict") and is_correct(s, GOLD, "flexible")
    with pytest.raises(ValueError, match="unknown answer style 'boxed'"):
        arith.restyle(GOLD, "boxed")


@pytest.mark.parametrize(
    "completion, strict, working",
    [
        (GOLD, True, True),
        ("7 + 5 = 12\n12 - 3 = 9\nThe answer is 9.", False, True),  # right working, wrong format
        ("7 + 5 = 13\n13 - 4 = 9\n#### 9", True, False),  # lucky: wrong lines, right number
        ("7 + 5 = 12\n#### 9", True, False),  # a line missing
        ("7 + 5 = 12\n12 - 3 = 9\n9 + 0 = 9\n#### 9", True, False),  # a line too many
        ("12 - 3 = 9\n7 + 5 = 12\n#### 9", True, False),  # out of order
        ("7 - 5 = 12\n12 - 3 = 9\n#### 9", True, False),  # wrong operation
    ],
)
def test_working_is_checked_line_by_line(completion, strict, working):
    assert is_correct(completion, GOLD, "strict") is strict
    assert arith.working_is_correct(completion, GOLD) is working
    assert verify_working({"name": "arith"}, completion, GOLD) is working


def test_verified_is_none_where_working_cannot_be_checked():
    assert verify_working({"name": "gsm8k", "path": "x"}, "#### 9", GOLD) is None


def test_gold_working_verifies_for_every_generated_problem():
    for r in arith.generate("test", 50, n_ops=3, max_operand=50) + arith.generate("test", 50, variant="ood"):
        assert arith.working_is_correct(r["answer"], r["answer"])


def test_chance_is_the_training_answer_distribution_dotted_with_the_test_answers():
    """Hand-computed: train answers {1: 1/2, 2: 1/4, 3: 1/4}; test answers [1, 3, 4] ->
    (1/2 + 1/4 + 0) / 3 = 1/4."""
    train = [{"answer": f"#### {a}"} for a in (1, 1, 2, 3)]
    test = [{"answer": f"#### {a}"} for a in (1, 3, 4)]
    import oxbench.tasks as T

    real = T.load_task_split
    T.load_task_split = lambda *a, **k: train
    try:
        assert chance_accuracy({"name": "arith"}, test) == pytest.approx(0.25)
    finally:
        T.load_task_split = real


def test_default_task_has_chance_at_most_2_percent_and_the_old_one_did_not():
    new, old = TaskConfig().model_dump(), {"name": "arith", "n_ops": 2, "max_operand": 12}
    assert chance_accuracy(new, load_task_split(new, "test", n=300)) <= 0.02
    assert chance_accuracy(old, load_task_split(old, "test", n=300)) > 0.04


def test_style_shares_are_validated():
    assert PretrainSettings(answer_styles={"gsm8k": 0.3, "sentence": 0.7}).answer_styles["sentence"] == 0.7
    with pytest.raises(ValidationError, match="sum to 1"):
        PretrainSettings(answer_styles={"gsm8k": 0.3, "sentence": 0.6})
    with pytest.raises(ValidationError, match="did you mean 'sentence'"):
        PretrainSettings(answer_styles={"gsm8k": 0.3, "sentense": 0.7})
    with pytest.raises(ValidationError, match="finite"):
        PretrainSettings(answer_styles={"gsm8k": float("nan"), "sentence": 1.0})


def test_gold_format_bases_keep_their_cache_key_and_styles_change_it():
    """8af21e12fd15 is the key this config had before the style knob existed (measured at a8d5fd6)."""
    task = {"name": "arith", "n_ops": 2, "max_operand": 12}
    assert PretrainConfig(scale="tiny-m", task=task).key() == "8af21e12fd15"
    styled = PretrainConfig(scale="tiny-m", task=task, answer_styles={"gsm8k": 0.3, "sentence": 0.7})
    assert styled.key() != "8af21e12fd15"


def test_a_base_pretrained_on_another_task_is_found_by_that_tasks_key():
    """``model.pretrain.task``: a run on larger operands than its base saw uses the base pre-trained on
    the smaller ones (the same pre-training key), and only arith runs can ask for it."""
    from oxbench.models.loading import pretrain_config

    budget = {
        "updates": 800,
        "batch_size": 96,
        "n_examples": 20000,
        "answer_styles": {"gsm8k": 0.3, "sentence": 0.7},
    }
    seen = RunConfig.model_validate({"model": {"name": "tiny-m", "pretrain": budget}})
    wider = RunConfig.model_validate(
        {"model": {"name": "tiny-m", "pretrain": {**budget, "task": {"n_ops": 2, "max_operand": 40}}},
         "task": {"max_operand": 60}}
    )  # fmt: skip
    assert pretrain_config(wider).key() == pretrain_config(seen).key() == "f7a51d4e46e3"  # the shipped tiny-m
    own = RunConfig.model_validate(
        {"model": {"name": "tiny-m", "pretrain": budget}, "task": {"max_operand": 60}}
    )
    assert pretrain_config(own).key() != "f7a51d4e46e3"  # without it: a base pre-trained on the run's task
    assert "task" not in seen.model.pretrain.hash_view()  # unset: run_ids as before the setting existed
    with pytest.raises(ValidationError, match="model.pretrain.task needs an arith run task"):
        RunConfig.model_validate(
            {"model": {"pretrain": {"task": {}}}, "task": {"name": "gsm8k", "path": "x"}}
        )
    with pytest.raises(ValidationError, match="max_operand >= 2"):
        PretrainSettings(task={"max_operand": 1})


def test_styled_rows_follow_the_shares_and_are_seeded():
    rows = arith.generate("train", 2000, distinct=False)
    out = styled_rows(rows, {"gsm8k": 0.3, "sentence": 0.7}, seed=1)
    share = sum("The answer is" in r["answer"] for r in out) / len(out)
    assert abs(share - 0.7) < 0.03
    assert out == styled_rows(rows, {"gsm8k": 0.3, "sentence": 0.7}, seed=1)
    assert styled_rows(rows, None, seed=1) is rows


@pytest.mark.parametrize(
    "section, field, value, needle",
    [
        ("task", "n_ops", 0, "no problems"),
        ("task", "max_operand", 1, "no problems"),
    ],
)
def test_a_difficulty_that_leaves_no_problems_is_an_error(section, field, value, needle):
    with pytest.raises(ValidationError, match=needle):
        RunConfig(**{section: {field: value}})


def test_rollout_stats_hand_computed():
    """Groups: 0 -> rewards {1, 1} (zero variance), 1 -> {0, 1}; one of 4 rollouts truncated."""

    def R(**kw):  # a Rollout's fields the statistics read (no per-function reward parts)
        return SimpleNamespace(reward_parts=None, **kw)

    exp = [
        R(group=0, reward=1.0, finished=True),
        R(group=0, reward=1.0, finished=True),
        R(group=1, reward=0.0, finished=False),
        R(group=1, reward=1.0, finished=True),
    ]
    assert rollout_stats(exp, world_size=2) == {"rollouts": 8, "zero_variance_groups": 0.5, "truncated": 0.25}


def test_token_entropy_hand_computed():
    """Uniform over 4 tokens: log 4; a one-hot (logit 1e4): 0; the masked position is ignored."""
    logits = torch.tensor([[[0.0, 0, 0, 0], [1e4, 0, 0, 0], [0, 0, 0, 0]]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    assert token_entropy(logits, mask) == pytest.approx(math.log(4) / 2)


def test_constant_schedule_is_flat_after_warmup_and_cosine_decays():
    const = warmup_cosine(10, 0.2, constant=True)
    cos = warmup_cosine(10, 0.2)
    assert [const(s) for s in range(2)] == [1 / 3, 2 / 3]
    assert all(const(s) == 1.0 for s in range(2, 10))
    assert cos(9) < 0.1


def test_progress_prints_an_eta_when_not_a_terminal(monkeypatch):
    buf = io.StringIO()
    monkeypatch.setattr("sys.stderr", buf)
    assert list(progress(range(4), "pretrain tiny-m", every_s=0.0)) == [0, 1, 2, 3]
    lines = buf.getvalue().splitlines()
    assert len(lines) == 4 and lines[-1].startswith("pretrain tiny-m: 4/4 (100%)") and "ETA 0 s" in lines[-1]
    assert progress_line("x", 1, 4, 10.0) == "x: 1/4 (25%), 10 s elapsed, ETA 30 s"


def test_whole_train_split_is_the_pool_or_every_distinct_problem():
    assert len(load_task_split({"name": "arith", "n_ops": 2, "max_operand": 50}, "train")) == arith.POOL_SIZE
    small = load_task_split({"name": "arith", "n_ops": 1, "max_operand": 5}, "train")
    assert 0 < len(small) < 30 and len({r["answer"] for r in small}) == len(small)


@pytest.mark.slow
def test_online_history_logs_what_shows_why_rl_learns(micro_model_dir):
    """grad_norm (computed on the fp32 ZeRO-0 path, where DeepSpeed returns None), token entropy,
    the share of zero-variance groups and the truncation rate, every logged step."""
    from test_engine import train

    _, res, _ = train("sgrpo", micro_model_dir)
    for row in res.history:
        assert row["grad_norm"] >= 0 and math.isfinite(row["grad_norm"])
        assert row["entropy"] > 0
        assert 0 <= row["zero_variance_groups"] <= 1 and 0 <= row["truncated"] <= 1
    assert any(row["grad_norm"] > 0 for row in res.history)  # a step whose groups all tie has none
    _, res, _ = train("sft", micro_model_dir)
    assert all(row["grad_norm"] > 0 for row in res.history)


def test_grad_norm_matches_torch_clip_grad_norm(micro_model_dir):
    """The logged norm is the pre-clipping global norm torch computes from the same gradients."""
    from oxbench.engine.learner import grad_norm as _grad_norm

    lin = torch.nn.Linear(3, 2)
    lin(torch.ones(4, 3)).pow(2).sum().backward()
    engine = SimpleNamespace(zero_optimization_stage=lambda: 0, module=lin)
    expected = torch.nn.utils.clip_grad_norm_(lin.parameters(), float("inf"))
    assert _grad_norm(engine) == pytest.approx(float(expected))
    assert _grad_norm(SimpleNamespace(zero_optimization_stage=lambda: 2, module=lin)) is None


def test_cli_writes_to_git_ignored_runs_by_default():
    from typer.testing import CliRunner

    from oxbench_cli import app

    help_text = CliRunner().invoke(app, ["run", "--help"]).output
    assert "runs/" in help_text
    ignored = (Path(__file__).parents[1] / ".gitignore").read_text().splitlines()
    assert "/runs/" in ignored


@pytest.mark.parametrize(
    "over, needles",
    [
        (
            {"model": {"pretrain": {"answer_styles": {"gsm8k": 0.3, "sentence": 0.6}}}},
            ["answer_styles", "sum to 1"],
        ),
        (
            {"model": {"pretrain": {"answer_styles": {"gsm8k": 0.3, "boxd": 0.7}}}},
            ["answer_styles", "'boxd'"],
        ),
        (
            {"task": {"n_ops": 1, "max_operand": 3}, "eval": {"n_test": 500}},
            ["field 'task'", "distinct train problems"],
        ),
        ({"task": {"n_ops": 0}}, ["task.n_ops", "no problems"]),
    ],
)
def test_bad_testbed_knobs_are_one_line_errors_before_any_work(tmp_path, over, needles):
    import yaml
    from typer.testing import CliRunner

    from oxbench_cli import app

    grid = {"name": "g", "base": {"model": {"name": "tiny-xs"}, **over}, "axes": {"method": ["sft"]}}
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(grid))
    res = CliRunner().invoke(app, ["run", "--grid", str(path), "--out", str(tmp_path / "o"), "--plan"])
    assert res.exit_code == 2, res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
    for n in needles:
        assert n in res.output, res.output


def test_online_micro_batch_that_does_not_divide_the_round_is_a_plan_time_error(tmp_path):
    """Online, train.batch_size is prompts per micro-batch: 16 prompts per round in micro-batches of 6
    do not divide, a one-line error naming the key (exit 2) before anything is pre-trained."""
    import yaml
    from typer.testing import CliRunner

    from oxbench_cli import app

    base = {"model": {"name": "tiny-xs"}, "train": {"batch_size": 6}, "online": {"prompts_per_batch": 16}}
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump({"name": "g", "base": base, "axes": {"method": ["sgrpo", "sft"]}}))
    res = CliRunner().invoke(app, ["run", "--grid", str(path), "--out", str(tmp_path / "o"), "--plan"])
    assert res.exit_code == 2, res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
    assert "train.batch_size" in res.output and "sgrpo" in res.output
