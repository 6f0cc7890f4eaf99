"""Tasks as plugins (issue 42, item 1): the registry (built-ins routed through it unchanged, errors in one
line), ``oxbench tasks`` / ``tasks new`` / ``tasks check``, and the target: a task written with ``oxbench
tasks new`` runs SFT, DPO and SGRPO to finished records with no change to oxbench (its SGRPO on two
reward functions, weighted and each logged: item 4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from typer.testing import CliRunner

from oxbench.config import RunConfig, format_validation_error
from oxbench.tasks import get_task, load_task_split, registry, task_names
from oxbench.tasks.errors import TaskError
from oxbench.tasks.grading import is_correct
from oxbench.tasks.rewards import ShuffledReward, reward_function
from oxbench.text.formatting import PromptFormat, format_prompt
from oxbench_cli import app

NAME = "word_flip"  # the scaffolded task of these tests


class ChatTokenizer:
    chat_template = "yes"

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        return "|".join(f"{m['role']}:{m['content']}" for m in messages) + "|assistant:"


@pytest.fixture(scope="module")
def scaffold(tmp_path_factory) -> Path:
    """``oxbench tasks new word_flip``'s package, as a user would have it before editing it."""
    where = tmp_path_factory.mktemp("plugin")
    res = CliRunner().invoke(app, ["tasks", "new", NAME, "--dir", str(where)])
    assert res.exit_code == 0, res.output
    return where / "oxbench-word-flip"


@pytest.fixture
def plugin(scaffold, monkeypatch):
    """The scaffolded task registered as ``--plugin`` does it; unregistered afterwards."""
    monkeypatch.syspath_prepend(str(scaffold))
    from oxbench.plugins import load_plugins

    assert load_plugins([f"oxbench_{NAME}"]) == [NAME]
    yield get_task(NAME)
    registry.unregister(NAME)
    os.environ.pop("OXBENCH_PLUGINS", None)


# ------------------------------------------------------------------ the built-ins, routed unchanged


def test_the_builtins_are_the_functions_they_were():
    """arith and GSM8K reach the registry with the very functions every run called before: the prompt,
    the graders (is_correct in each mode), the reward and its controls, the rows."""
    arith, gsm8k = get_task("arith"), get_task("gsm8k")
    assert {"arith", "gsm8k"} <= set(task_names()) and get_task("arith_ood") is arith
    for spec in (arith, gsm8k):
        assert spec.prompt is format_prompt
        for mode in ("strict", "flexible"):
            g = spec.grader(mode)
            assert (g.func, g.args, g.keywords) == (is_correct, (), {"mode": mode})
            r = reward_function(mode, spec)
            assert (r.func, r.keywords) == (is_correct, {"mode": mode})
            shuffled = reward_function(f"shuffled-{mode}", spec)
            assert isinstance(shuffled, ShuffledReward) and (shuffled.mode, shuffled.grade) == (mode, None)
    task = RunConfig().task.model_dump()
    from oxbench.tasks import arith as A

    assert load_task_split(task, "test", n=5) == A.generate("test", 5, n_ops=2, max_operand=40)
    ood = load_task_split(arith.ood(task), "test", n=3)
    assert ood == A.generate("test", 3, n_ops=2, max_operand=40, variant="ood")
    assert gsm8k.validation_in_train and not arith.validation_in_train
    assert "confirm" in arith.splits and "confirm" not in gsm8k.splits


def test_prompt_format_defaults_to_the_builtin_prompt():
    plain = SimpleNamespace(chat_template=None)
    for tok in (plain, ChatTokenizer()):
        assert PromptFormat()(tok, "What is 2 + 3?") == format_prompt(tok, "What is 2 + 3?")
    custom = PromptFormat(instruction="", plain="Q: {question}\nA:", system="Be brief.")
    assert custom(plain, "x {y}") == "Q: x {y}\nA:"
    assert custom(ChatTokenizer(), "x") == "system:Be brief.|user:x|assistant:"


# ------------------------------------------------------------------ the registry's errors, one line each


def test_an_unknown_task_is_one_line_naming_the_closest(tmp_path):
    with pytest.raises(Exception) as err:
        RunConfig(task={"name": "gsm8kk", "path": "x"})
    assert format_validation_error(err.value, "g.yaml") == (
        "g.yaml: field 'task.name': unknown task 'gsm8kk'; did you mean 'gsm8k'?"
    )
    grid = tmp_path / "g.yaml"
    grid.write_text(
        yaml.safe_dump({"name": "g", "base": {"task": {"name": "word_flop"}}, "axes": {"seed": [0]}})
    )
    res = CliRunner().invoke(app, ["run", "--grid", str(grid), "--out", str(tmp_path / "out"), "--plan"])
    assert res.exit_code == 2 and "unknown task 'word_flop'" in res.output and not (tmp_path / "out").exists()


def _spec(**kw) -> registry.TaskSpec:
    base = {"name": "tmp_task", "load": lambda split, **k: [], "graders": {"strict": lambda c, a: c == a}}
    return registry.TaskSpec(**{**base, **kw})


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        ({"name": "no-dash"}, "name must be an identifier"),
        ({"graders": {"flexible": lambda c, a: True}}, "graders must map 'strict'"),
        ({"graders": {"strict": lambda c, a: True, "loose": lambda c, a: True}}, "'loose' is not one of"),
        ({"splits": ("train",)}, "splits must hold train and test"),
        ({"bins": {"mid": (0.6, 0.3)}}, "bin 'mid' must be (lo, hi)"),
        ({"rewards": {"strict": lambda completions, **k: []}}, "not a grader's"),
    ],
)
def test_a_malformed_spec_is_refused(kw, why):
    with pytest.raises(TaskError) as err:
        _spec(**kw)
    assert why in str(err.value) and "\n" not in str(err.value)


def test_a_second_task_under_a_taken_name_names_both_origins():
    with pytest.raises(
        TaskError, match="duplicate task 'arith': from oxbench \\(built-in\\) and from --plugin x"
    ):
        registry.register(_spec(name="arith"), origin="--plugin x")
    first = registry.register(_spec(), origin="notebook cell 1")
    try:
        assert registry.register(first, origin="notebook cell 1") is first and get_task("tmp_task") is first
        with pytest.raises(TaskError, match="'tmp_task': from notebook cell 1 and from notebook cell 2"):
            registry.register(_spec(), origin="notebook cell 2")
    finally:
        registry.unregister("tmp_task")


def test_a_broken_entry_point_breaks_only_its_task(monkeypatch):
    ep = SimpleNamespace(
        name="broken", value="nowhere.mod:spec", dist=SimpleNamespace(name="d"), load=lambda: 42
    )
    real = registry._entry_points
    monkeypatch.setattr(
        registry,
        "_entry_points",
        lambda g: {**real(g), **({"broken": [ep]} if g == registry.TASK_GROUP else {})},
    )
    assert "broken" in task_names()  # listing imports nothing
    with pytest.raises(TaskError, match=r"^plugin 'broken' \(nowhere.mod:spec, distribution d\) is a int"):
        get_task("broken")
    assert get_task("arith").name == "arith"


@pytest.mark.parametrize(
    ("rows", "why"),
    [
        ({"question": "q"}, "returned dict, not a list"),
        ([{"question": "q"}], "row 1: field 'answer' must be a string, got NoneType"),
        ([{"question": "q", "answer": 3}], "field 'answer' must be a string, got int"),
        (["q"], "row 1: expected a dict"),
    ],
)
def test_bad_rows_are_one_line_naming_the_task_and_the_row(rows, why):
    spec = _spec(load=lambda split, **k: rows)
    with pytest.raises(TaskError) as err:
        registry.load_rows(spec, {"name": "tmp_task"}, "train", n=None, seed=0)
    assert str(err.value).startswith("task 'tmp_task': ") and why in str(err.value)


def test_rows_get_ids_and_are_cut_to_n_and_a_missing_split_is_named():
    spec = _spec(load=lambda split, *, n, seed, task: [{"question": str(i), "answer": "a"} for i in range(5)])
    rows = registry.load_rows(spec, {"name": "tmp_task"}, "test", n=2, seed=0)
    assert rows == [
        {"question": "0", "answer": "a", "id": "tmp_task-test-0"},
        {"question": "1", "answer": "a", "id": "tmp_task-test-1"},
    ]
    with pytest.raises(
        TaskError, match="task 'tmp_task' has no 'validation' split \\(it has: train, test\\)"
    ):
        registry.load_rows(spec, {"name": "tmp_task"}, "validation", n=2, seed=0)


# ------------------------------------------------------------------ oxbench tasks, new, check


def test_the_scaffold_keeps_the_contract_and_check_names_a_broken_rule(scaffold, monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(scaffold))
    res = CliRunner().invoke(app, ["tasks", "check", f"oxbench_{NAME}:spec"])
    assert res.exit_code == 0, res.output
    assert (
        "word_flip: every rule holds (splits, deterministic, graders, prompt, rewards, metrics)" in res.output
    )
    pyproject = (scaffold / "pyproject.toml").read_text()
    assert '[project.entry-points."oxbench.tasks"]\nword_flip = "oxbench_word_flip:spec"' in pyproject
    bad = tmp_path / "bad_task.py"
    bad.write_text(
        f"import dataclasses\nfrom oxbench_{NAME} import spec as s\nspec = dataclasses.replace(s, graders={{'strict': lambda c, a: True}})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    res = CliRunner().invoke(app, ["tasks", "check", "bad_task:spec"])
    assert (
        res.exit_code == 1
        and "broken word_flip: graders: grader 'strict' passes an empty completion" in res.output
    )
    res = CliRunner().invoke(app, ["tasks", "new", NAME, "--dir", str(scaffold.parent)])
    assert res.exit_code == 2 and "already exists" in res.output


def test_oxbench_tasks_lists_the_builtins_and_a_plugin(plugin):
    res = CliRunner().invoke(app, ["tasks", "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.output)["tasks"]}
    assert {"arith", "gsm8k", NAME} <= set(rows)
    assert rows[NAME]["rewards"][-1] == "letters" and rows[NAME]["bins"] == {"sometimes": [0.1, 0.9]}
    assert (
        rows[NAME]["origin"] == f"--plugin oxbench_{NAME}" and rows["arith"]["origin"] == "oxbench (built-in)"
    )


def test_a_plugin_task_validates_with_its_bins_and_rewards(plugin):
    cfg = RunConfig(
        method="sgrpo", task={"name": NAME, "options": {"max_len": 4}}, data={"subset": "sometimes"}
    )
    assert cfg.task.hash_view()["options"] == {"max_len": 4} and "options" not in RunConfig().task.hash_view()
    with pytest.raises(Exception, match="unknown subset 'sometime'; did you mean 'sometimes'"):
        RunConfig(task={"name": NAME}, data={"subset": "sometime"})
    with pytest.raises(Exception, match="unknown subset 'sometimes'"):
        RunConfig(data={"subset": "sometimes"})  # arith has no such bin
    assert (
        plugin.grade("cba", "cba")
        and not plugin.grade("abc", "cba")
        and plugin.grade("x cba", "cba", "flexible")
    )
    assert reward_function("strict", plugin) is plugin.graders["strict"]
    assert reward_function("shuffled-flexible", plugin).grade is plugin.graders["flexible"]


# ------------------------------------------------------------------ the target


def test_a_user_task_runs_sft_dpo_and_sgrpo_to_finished_records(scaffold, micro_model_dir, tmp_path):
    """``oxbench tasks new``'s package, unedited and not installed (``--plugin``, on ``PYTHONPATH``), runs
    the three paradigms through ``oxbench run`` on the micro model: no oxbench change, no entry point."""
    grid = {
        "name": "own_task",
        "base": {
            "model": {"name": micro_model_dir},
            "task": {"name": NAME, "options": {"max_len": 4}},
            "data": {"n_train": 8, "max_new_tokens": 6, "self_play_k": 2, "chosen_source": "gold"},
            "train": {"batch_size": 4, "max_steps": 2, "lr": 1e-3},
            "online": {"n": 2, "prompts_per_batch": 2, "rounds": 2, "max_new_tokens": 6},
            "eval": {"n_test": 4, "k": 2, "n_samples": 2, "n_sampled": 2, "max_new_tokens": 6},
        },
        "axes": {"method": ["sft", "dpo", "sgrpo"], "seed": [0]},
        # item 4: the strict grader and the task's own reward function, weighted, each logged
        "methods": {
            "sgrpo": {"online": {"rewards": [{"name": "strict"}, {"name": "letters", "weight": 0.5}]}}
        },
    }
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(grid))
    env = {k: v for k, v in os.environ.items() if k != "OXBENCH_PLUGINS"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(scaffold), env.get("PYTHONPATH")) if p)
    cmd = ["run", "--plugin", f"oxbench_{NAME}", "--grid", str(path), "--out", str(tmp_path / "out")]
    proc = subprocess.run(
        [sys.executable, "-m", "oxbench_cli", *cmd], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = {}
    for rec_path in (tmp_path / "out" / "own_task").glob("*/run.json"):
        rec = json.loads(rec_path.read_text())
        records[rec["method"]] = (rec, rec_path.parent)
    assert sorted(records) == ["dpo", "sft", "sgrpo"]
    for method, (rec, d) in records.items():
        assert rec["status"] == "finished", (method, rec.get("error"))
        assert rec["config"]["task"]["name"] == NAME and rec["optimizer_steps"] == 2
        assert "letters_in_place" in rec["metrics"] and rec["metrics"]["chance"] is None
        outcomes = [json.loads(line) for line in (d / "eval.jsonl").read_text().splitlines()]
        assert [o["id"] for o in outcomes] == [f"{NAME}-test-{i}" for i in range(4)]
    assert records["dpo"][0]["data"]["pairs"] > 0
    logged = [json.loads(line) for line in (records["sgrpo"][1] / "metrics.jsonl").read_text().splitlines()]
    for row in logged:
        whole = row["reward/strict"] + 0.5 * row["reward/letters"]
        assert row["reward_mean"] == pytest.approx(whole) and 0 <= row["reward/letters"] <= 1
