"""A cell's compute ledger from its config (oxbench/engine/cost.py): the counts a real run records, as
upper bounds, and the expected time on GPUs that the table in docs/gpus.md gives."""

from __future__ import annotations

import os

import pytest
from helpers import cfg_for, length_parity_reward, rows_for, train_online

import losses
from oxbench.config import RunConfig
from oxbench.engine import cost as L
from oxbench.engine import distributed as D
from oxbench.engine.cost import QWEN25
from oxbench.models.loading import load_model
from oxbench_cli.costs import ledger_table


def test_the_expected_ledger_bounds_what_an_online_run_records(micro_model_dir):
    D.init_distributed()
    cfg = cfg_for(micro_model_dir, "sgrpo")
    spec = losses.get("sgrpo")
    model, tok = load_model(micro_model_dir, cfg, init_seed=0)
    _, res = train_online(cfg, spec, spec.resolve_hparams(), model, tok, rows_for("online", 8), run="ledger",
                          reward_fn=length_parity_reward)  # fmt: skip
    want = L.expected_ledger(
        cfg, online=True, prompt_tokens=cfg.data.max_len
    )  # any prompt: capped at max_len
    assert want["rollouts"] == res.compute["rollouts"] == 2 * 4 * 3
    assert want["generated_tokens"] == 24 * 12 >= res.compute["generated_tokens"] > 0
    assert want["trained_tokens"] >= res.compute["trained_tokens"] > 0


def test_offline_counts_and_self_play():
    cfg = RunConfig(method="dpo", data={"n_train": 100, "max_len": 512, "max_new_tokens": 64, "self_play_k": 4},
                    train={"epochs": 2})  # fmt: skip
    got = L.expected_ledger(cfg, online=False, pairs=True, prompt_tokens=100)
    assert got == {"rollouts": 0, "generated_tokens": 100 * 4 * 64, "trained_tokens": 100 * 2 * 164 * 2}
    capped = cfg.model_copy(update={"train": cfg.train.model_copy(update={"max_steps": 3, "batch_size": 8})})
    assert (
        L.expected_ledger(capped, online=False, pairs=True, prompt_tokens=100)["trained_tokens"]
        == 3 * 8 * 164 * 2
    )


def test_expected_seconds_at_the_stated_rates():
    rates = L.Rates(matmul_flops=1e15, mfu=0.5, hbm_bytes_per_s=4e12, batch=100, step_floor_s=0.0)
    shape = QWEN25["7B"]
    sec = L.expected_seconds({"trained_tokens": 1000, "generated_tokens": 500}, shape, 2, rates=rates)
    params = shape.params()
    assert sec["train_s"] == pytest.approx(1000 * 6 * params / 5e14 / 2)
    assert sec["gen_s"] == pytest.approx(5 * (2 * params / 2e12) / 2)
    floor = L.expected_seconds({"trained_tokens": 0, "generated_tokens": 500}, QWEN25["0.5B"], 1)
    assert floor["gen_s"] == pytest.approx(500 / 256 * 0.010)  # a small model's step is launch-bound


def test_the_docs_table_is_the_ledgers():
    docs = open(os.path.join(os.path.dirname(__file__), "..", "docs", "gpus.md"), encoding="utf-8").read()
    assert ledger_table() in docs, "docs/gpus.md: paste the second table `oxbench costs` prints"
