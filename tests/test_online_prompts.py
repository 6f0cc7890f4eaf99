"""Your own prompts train online methods (issue 42, items 3 and 4), as TRL's ``GRPOTrainer`` trains on a
prompt-only dataset with ``reward_funcs``: an online cell with ``data.path`` samples its rollouts' prompts
from the file's rows (standard as written, conversational through the chat template), is rewarded by
``online.rewards`` (required: the file has no task answers), and every other column of a row reaches each
reward function as a keyword argument, one value per completion. The evaluation stays the task's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli import grid, micro_cell, one_line_error, runner, write
from test_data_formats import CONVERSATIONAL, STANDARD, Q, jsonl, msg

from oxbench.config import RunConfig
from oxbench.data import formats
from oxbench.grid import runner as grid_runner
from oxbench.grid.runs import run_dir
from oxbench.models.loading import load_tokenizer
from oxbench.models.realformat import build_real_checkpoint
from oxbench.tasks import arith, registry
from oxbench.tasks.rewards import call_reward
from oxbench_cli import app

PROMPTS = [
    {"prompt": f"{a} + {b} =", "answer": str(a + b), "level": a % 2} for a, b in ((1, 2), (3, 4), (5, 6))
]


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory) -> Path:
    """The real-format checkpoint (Qwen2, byte-level BPE, Qwen's chat template): about 2 s."""
    d = tmp_path_factory.mktemp("realformat")
    texts = [{"question": r["question"], "answer": r["answer"]} for r in arith.generate("train", 200, seed=0)]
    return build_real_checkpoint(d / "model", jsonl(d / "texts.jsonl", texts), vocab_size=512)


@pytest.fixture(scope="module")
def chat_tok(chat_model):
    return load_tokenizer(str(chat_model))


@pytest.fixture
def spy():
    """A registered reward function that keeps every call's keyword arguments: 1 for an even length."""
    calls: list[dict] = []

    def seen(completions, **columns):
        calls.append({"completions": completions, **columns})
        return [float(len(c if isinstance(c, str) else c[0]["content"]) % 2 == 0) for c in completions]

    registry.register(registry.RewardSpec(name="spy", fn=seen), origin="test")
    yield calls
    registry.unregister("spy", "reward")


def _online_cell(model: str, path: Path, method: str = "sgrpo", **online) -> dict:
    base = micro_cell(model)
    base["data"] = {**base["data"], "path": str(path), "max_len": 96}
    base["online"] = {"n": 4, "prompts_per_batch": 2, "rounds": 2, "max_new_tokens": 8, **online}
    base["train"] = {"batch_size": 2, "lr": 1e-3, "warmup_ratio": 0.0}
    base["eval"] = {"n_test": 2, "n_ood": 0, "k": 0, "max_new_tokens": 8}
    return {"grid": "mine", "method": method, "track": [], **base}


def _metrics(out: Path, cfg: RunConfig) -> list[dict]:
    text = (run_dir(out, "mine", cfg.run_id()) / "metrics.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def test_a_prompt_only_file_trains_sgrpo_on_its_prompts_rewarded_by_its_columns(
    tmp_path, micro_model_dir, spy
):
    """Every rollout's prompt is a row of the file; the spy and the flexible grader get the row's
    ``answer`` (and ``level``) column beside each completion; the record says the prompts came from the
    file; the evaluation is the task's."""
    path = jsonl(tmp_path / "mine.jsonl", PROMPTS)
    rewards = [{"name": "spy"}, {"name": "flexible", "weight": 0.5}]
    cfg = RunConfig(**_online_cell(micro_model_dir, path, rewards=rewards))
    rec = grid_runner.run_cell(cfg, tmp_path / "out", verbose=False)
    assert rec["status"] == "finished", (rec.get("error"), rec.get("traceback"))
    assert rec["data"] == {
        "source": "file",
        "path": str(path),
        "format": "prompt_only",
        "conversational": False,
        "rows": 3,
        "prompts": 3,
    }
    assert rec["data_files"]["data.path"] and rec["optimizer_steps"] == 2
    assert len(spy) == 2 * 2  # two rounds of two prompts, one call per prompt's group
    by_prompt = {r["prompt"]: r for r in PROMPTS}
    keys = {"completions", "prompts", "completion_ids", "trainer_state", "answer", "level"}
    tok = load_tokenizer(micro_model_dir)
    for call in spy:
        assert set(call) == keys and len(call["completions"]) == 4
        decoded = [tok.decode(ids, skip_special_tokens=True) for ids in call["completion_ids"]]
        assert decoded == call["completions"]  # TRL's completion_ids: the sampled tokens of each
        row = by_prompt[call["prompts"][0]]  # a prompt of the file, as the file has it
        assert call["prompts"] == [row["prompt"]] * 4 and call["answer"] == [row["answer"]] * 4
        assert call["level"] == [row["level"]] * 4
    # TRL's trainer_state: the sampling policy's optimiser steps, 0 in the first round, 1 in the second
    assert [c["trainer_state"].global_step for c in spy] == [0, 0, 1, 1]
    steps = _metrics(tmp_path / "out", cfg)
    assert all("reward/spy" in s and "reward/flexible" in s for s in steps)
    assert rec["metrics"]["n_test"] == 2  # the task's test problems


def test_a_conversational_prompt_goes_through_the_chat_template_and_reaches_rewards_as_trl_s(
    tmp_path, chat_model, chat_tok, spy
):
    """As TRL's ``GRPOTrainer``: the policy is prompted with the chat template's text (the generation
    prompt added); a reward function gets the prompt's messages and each completion as one assistant
    message."""
    rows = [{"prompt": [msg("user", f"What is {a} + 1?")], "answer": str(a + 1)} for a in range(4)]
    path = jsonl(tmp_path / "chat.jsonl", rows)
    [first, *_], stats = formats.prompt_rows(formats.check(path, "online"), chat_tok, n=2)
    want = chat_tok.apply_chat_template(rows[0]["prompt"], tokenize=False, add_generation_prompt=True)
    assert first["prompt"] == first["question"] == want and want.endswith("<|im_start|>assistant\n")
    assert stats["prompts"] == 2 and stats["conversational"] is True
    cfg = RunConfig(**_online_cell(str(chat_model), path, rewards=[{"name": "spy"}], n_prompts=2))
    rec = grid_runner.run_cell(cfg, tmp_path / "out", verbose=False)
    assert rec["status"] == "finished", (rec.get("error"), rec.get("traceback"))
    assert rec["data"]["conversational"] is True and rec["data"]["prompts"] == 2
    for call in spy:
        assert call["prompts"][0] in [r["prompt"] for r in rows[:2]]  # the file's first n_prompts rows
        assert all(
            c[0]["role"] == "assistant" and isinstance(c[0]["content"], str) for c in call["completions"]
        )


def test_trl_s_keyword_arguments_for_a_file_s_rows(tmp_path, chat_tok):
    """Every column but the prompt, the prompt as the file has it; a completion continues a final
    assistant message, so its message starts with that message's text (TRL's bootstrap); a grader's
    reward grades the message against the ``answer`` column."""
    seen = {}

    def keep(completions, **columns):
        seen.update(columns, completions=completions)
        return [0.0] * len(completions)

    prefilled = [Q, msg("assistant", "The answer is")]
    path = jsonl(
        tmp_path / "d.jsonl", [{"prompt": prefilled, "completion": [msg("assistant", " 7")], "id": 3}]
    )
    [row], _ = formats.prompt_rows(formats.check(path, "online"), chat_tok)
    assert row["prompt"].endswith("The answer is") and not row["prompt"].endswith("<|im_start|>assistant\n")
    call_reward("keep", keep, [" 7", " 8"], row)
    assert seen["prompts"] == [prefilled] * 2 and seen["id"] == [3, 3]
    assert seen["completion"] == [[msg("assistant", " 7")]] * 2  # the file's column, not the sampled text
    assert seen["completions"] == [
        [msg("assistant", "The answer is 7")],
        [msg("assistant", "The answer is 8")],
    ]


def _plan(tmp_path: Path, model: str, row: dict, method: str = "sgrpo", **online):
    path = jsonl(tmp_path / "mine.jsonl", [row])
    cell = _online_cell(model, path, method, **online)
    base = {k: v for k, v in cell.items() if k not in ("grid", "method")}
    g = write(tmp_path, "g.yaml", grid(model, base=base, axes={"method": [method]}))
    return runner.invoke(app, ["run", "--grid", str(g), "--plan"]), path


def test_a_file_s_prompts_without_online_rewards_is_the_grid_s_one_line_error(tmp_path, micro_model_dir):
    result, path = _plan(tmp_path, micro_model_dir, STANDARD["prompt_only"])
    one_line_error(result, "g.yaml", "(cell sgrpo/", "field 'online.rewards'", str(path), "docs/rewards.md")


@pytest.mark.parametrize(
    "row,method,online,needles",
    [
        (
            STANDARD["implicit_preference"],
            "sgrpo",
            {"rewards": [{"name": "spy"}]},
            ("field 'data.path'", "which give no prompts; online methods train on prompt-only (prompt)"),
        ),
        (
            STANDARD["prompt_only"],
            "rloo",
            {"rewards": [{"name": "strict"}]},
            ("field 'online.rewards'", "reward 'strict' grades against an 'answer' column", "prompt"),
        ),
        (
            STANDARD["prompt_only"],
            "spin",
            {"rewards": [{"name": "spy"}]},
            ("field 'data.path'", "spin's chosen answers are the task's gold answers"),
        ),
    ],
)
def test_an_online_cell_a_file_cannot_train_is_one_line(
    tmp_path, micro_model_dir, spy, row, method, online, needles
):
    result, path = _plan(tmp_path, micro_model_dir, row, method, **online)
    one_line_error(result, "g.yaml", f"(cell {method}/", str(path), *needles)


@pytest.mark.parametrize("kind", ["prompt_only", "prompt_completion", "preference", "unpaired"])
def test_a_file_with_prompts_plans_for_an_online_method_and_enters_the_run_id(
    tmp_path, micro_model_dir, spy, kind
):
    """Prompt-completion, preference and unpaired files give their prompts (their other columns go to the
    reward functions), as a prompt-only file does."""
    for conversational in (False, True):
        row = (CONVERSATIONAL if conversational else STANDARD)[kind]
        assert formats.check(jsonl(tmp_path / "d.jsonl", [row]), "online").type == kind
    result, _ = _plan(tmp_path, micro_model_dir, STANDARD[kind], rewards=[{"name": "spy"}])
    assert result.exit_code == 0, result.output
    plain = RunConfig(model={"name": micro_model_dir}, method="sgrpo", online={"rewards": [{"name": "spy"}]})
    mine = plain.model_copy(update={"data": plain.data.model_copy(update={"path": "mine.jsonl"})})
    assert mine.run_id() != plain.run_id()
