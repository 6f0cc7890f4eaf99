"""A reward model as a reward function (issue 42, item 4): ``online.rewards: [{name, model: PATH}]``, as
TRL's ``GRPOTrainer`` takes a model in ``reward_funcs``. A sequence-classification checkpoint built here
with ``save_pretrained`` scores prompt + completion; its logit is the reward, equal to the model's own
forward pass on the text TRL would build; a cell trains on it and logs ``reward/<name>``; a path that is
no checkpoint is the grid's one-line error before any work; the run_ids of configs without a model are
unchanged."""

from __future__ import annotations

import json

import pytest
import torch
from test_cli import one_line_error
from test_data_formats import jsonl
from test_online_prompts import PROMPTS, _online_cell, _plan
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForSequenceClassification

from oxbench.config import RunConfig
from oxbench.grid import runner as grid_runner
from oxbench.grid.runs import run_dir
from oxbench.models.reward_model import RewardModel
from oxbench.models.tokenizer import build_char_tokenizer


@pytest.fixture(scope="module")
def reward_model_dir(tmp_path_factory) -> str:
    """A micro Qwen2 sequence classifier (one label) and the char tokenizer, saved as a checkpoint."""
    d = tmp_path_factory.mktemp("reward_model")
    tok = build_char_tokenizer()
    torch.manual_seed(1)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, intermediate_size=32, max_position_embeddings=256, num_labels=1,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)  # fmt: skip
    Qwen2ForSequenceClassification(cfg).save_pretrained(d)
    tok.save_pretrained(d)
    return str(d)


def test_the_reward_is_the_model_s_logit_on_prompt_plus_completion(reward_model_dir):
    """Each completion's reward is the classifier's logit on prompt + completion alone (no padding, no
    special tokens), whatever else shares its batch: right padding and the pad token id leave it be."""
    rm = RewardModel(reward_model_dir, batch_size=3)
    completions = ["3", " 3 #### 3", "no idea at all, sorry", "7"]
    got = rm(completions=completions, prompts=["1 + 2 ="] * 4, answer=["3"] * 4)
    tok = AutoTokenizer.from_pretrained(reward_model_dir)
    model = Qwen2ForSequenceClassification.from_pretrained(reward_model_dir).eval()
    for c, r in zip(completions, got):
        ids = tok("1 + 2 =" + c, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            want = model(**ids).logits[0, 0].item()
        assert r == pytest.approx(want, abs=1e-5), (c, r, want)
    assert len(set(got)) == 4  # the texts differ, and so do their rewards


def test_bf16_rewards_are_the_fp32_ones_within_tolerance(reward_model_dir):
    """The run's model.dtype is the reward model's: bf16 on the CPU, within bf16's precision."""
    completions = ["3", "12", "#### 3"]
    fp32 = RewardModel(reward_model_dir)(completions=completions, prompts=["1 + 2 ="] * 3)
    rm = RewardModel(reward_model_dir, dtype="bf16")
    assert next(rm.model.parameters()).dtype == torch.bfloat16
    bf16 = rm(completions=completions, prompts=["1 + 2 ="] * 3)
    assert bf16 == pytest.approx(fp32, abs=0.05)


def test_a_cell_trains_on_a_reward_model_and_logs_its_reward(tmp_path, micro_model_dir, reward_model_dir):
    path = jsonl(tmp_path / "mine.jsonl", PROMPTS)
    rewards = [{"name": "rm", "model": reward_model_dir}, {"name": "flexible", "weight": 0.5}]
    cfg = RunConfig(**_online_cell(micro_model_dir, path, rewards=rewards))
    rec = grid_runner.run_cell(cfg, tmp_path / "out", verbose=False)
    assert rec["status"] == "finished", (rec.get("error"), rec.get("traceback"))
    assert rec["config"]["online"]["rewards"][0] == {"name": "rm", "weight": 1.0, "model": reward_model_dir}
    text = (run_dir(tmp_path / "out", "mine", cfg.run_id()) / "metrics.jsonl").read_text()
    steps = [json.loads(line) for line in text.splitlines()]
    assert steps and all("reward/rm" in s and "reward/flexible" in s for s in steps)
    assert any(s["reward/rm"] != 0.0 for s in steps)  # a logit, not a 0/1 verdict


def test_a_reward_model_path_that_is_no_checkpoint_is_one_line(tmp_path, micro_model_dir):
    for model, needle in ((str(tmp_path / "nowhere"), "does not exist"), ("tiny-s", "not a tiny rung")):
        got, _ = _plan(tmp_path, micro_model_dir, PROMPTS[0], rewards=[{"name": "rm", "model": model}])
        one_line_error(got, "g.yaml", "field 'online.rewards' (rm)", needle)


def test_a_reward_without_a_model_keeps_its_run_id():
    """``model`` is a setting added after records were made: left out, the hash is what it was."""
    term = {"name": "flexible", "weight": 0.5}
    a = RunConfig(online={"rewards": [term]}, data={"path": "x.jsonl"}, method="sgrpo")
    b = RunConfig(online={"rewards": [{**term, "model": None}]}, data={"path": "x.jsonl"}, method="sgrpo")
    c = RunConfig(online={"rewards": [{**term, "model": "org/rm"}]}, data={"path": "x.jsonl"}, method="sgrpo")
    assert a.run_id() == b.run_id() != c.run_id()
