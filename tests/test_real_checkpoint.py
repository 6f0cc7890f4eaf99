"""A real-format checkpoint in CI (issue 24, item 4): a Qwen2 model and a byte-level BPE tokenizer with
Qwen's special tokens and chat template, built locally (:mod:`oxbench.models.realformat`), saved with
``save_pretrained`` and given as ``model.name: <path>`` exactly as a Hub id would be; then one
``oxbench run --grid`` over real GSM8K trains SFT, DPO (gold against a sample), KTO, SGRPO and PPO under
ZeRO-0 and ZeRO-3, LoRA, and the delayed and async rollout sources, and every cell must finish."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from oxbench.config import RunConfig
from oxbench.data.pipeline import preference_pairs
from oxbench.models.loading import base_model_path, load_model, load_tokenizer
from oxbench.models.realformat import CHAT_TEMPLATE, ENDOFTEXT, IM_END, IM_START, build_real_checkpoint
from oxbench.tasks.gsm8k import default_gsm8k_dir, load_gsm8k
from oxbench.text.formatting import format_prompt

GSM8K = default_gsm8k_dir()
pytestmark = pytest.mark.skipif(
    not (GSM8K / "train.jsonl").is_file(), reason=f"GSM8K data not at {GSM8K} (set OXBENCH_GSM8K_DIR)"
)
VOCAB = 1024
N_TRAIN, STEPS = 8, 2

# one row per cell: (method, ZeRO stage, extra settings); every cell must reach a finished record
CELLS: list[tuple[str, int, dict]] = [
    ("sft", 0, {}),
    ("sft", 3, {}),
    ("dpo", 0, {}),
    ("dpo", 3, {}),
    ("dpo", 0, {"model.lora.enabled": True}),
    ("kto", 0, {}),
    ("kto", 3, {}),
    ("sgrpo", 0, {}),
    ("sgrpo", 3, {}),
    ("ppo", 0, {}),
    ("ppo", 3, {}),
    ("sgrpo", 0, {"online.source": "delayed", "online.staleness": 1}),
    ("sgrpo", 0, {"online.source": "async", "online.staleness": 1}),
    ("ppo", 3, {"online.source": "delayed", "online.staleness": 1}),
    ("sgrpo", 3, {"online.source": "async", "online.staleness": 1}),
    ("sgrpo", 3, {"model.lora.enabled": True}),
]
ONLINE = ("sgrpo", "ppo")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """The checkpoint, built once for the module."""
    return build_real_checkpoint(
        tmp_path_factory.mktemp("qwen_like"), GSM8K / "train.jsonl", vocab_size=VOCAB
    )


def test_build_is_deterministic(checkpoint, tmp_path):
    again = build_real_checkpoint(tmp_path / "again", GSM8K / "train.jsonl", vocab_size=VOCAB)
    names = sorted(p.name for p in checkpoint.iterdir())
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= set(names)
    assert names == sorted(p.name for p in again.iterdir())
    for name in names:
        assert (checkpoint / name).read_bytes() == (again / name).read_bytes(), name
    other = build_real_checkpoint(tmp_path / "seed1", GSM8K / "train.jsonl", vocab_size=VOCAB, seed=1)
    assert (other / "tokenizer.json").read_bytes() == (checkpoint / "tokenizer.json").read_bytes()
    assert (other / "model.safetensors").read_bytes() != (checkpoint / "model.safetensors").read_bytes()


def test_tokenizer_round_trips_with_qwen_specials_and_chat_template(checkpoint):
    tok = load_tokenizer(str(checkpoint))
    assert type(tok).__name__ == "Qwen2Tokenizer" and len(tok) == VOCAB
    assert tok.convert_tokens_to_ids([ENDOFTEXT, IM_START, IM_END]) == [VOCAB - 3, VOCAB - 2, VOCAB - 1]
    assert (tok.eos_token, tok.pad_token) == (IM_END, ENDOFTEXT)
    rows = load_gsm8k(str(GSM8K), "test", limit=20)
    texts = [r["question"] for r in rows] + [r["answer"] for r in rows]
    encoded = [tok(text, add_special_tokens=False)["input_ids"] for text in texts]
    assert [tok.decode(ids) for ids in encoded] == texts
    # merges learnt on GSM8K's train split: its test text takes far fewer tokens than bytes (~0.4)
    assert sum(map(len, encoded)) < 0.5 * sum(len(t.encode()) for t in texts)
    unseen = "Zoë paid €3.50 — 日本\t\n  x"  # byte-level: text never seen in training still round-trips
    assert tok.decode(tok(unseen, add_special_tokens=False)["input_ids"]) == unseen
    ids = tok(f"{IM_START}user\nhi{IM_END}", add_special_tokens=False)["input_ids"]
    assert ids[0] == VOCAB - 2 and ids[-1] == tok.eos_token_id  # each special is one token
    assert tok.chat_template == CHAT_TEMPLATE
    prompt = format_prompt(tok, "What is 2 + 3?")
    assert prompt.startswith(f"{IM_START}system\nYou are a helpful assistant.{IM_END}\n{IM_START}user\n")
    assert prompt.endswith(f"{IM_END}\n{IM_START}assistant\n") and "What is 2 + 3?" in prompt


def test_loaded_by_path_like_a_hub_id(checkpoint):
    """``model.name: <path>`` takes the Hub id's branch of the loader (no tiny-rung pre-training) and comes
    back as the classes ``Qwen/Qwen2.5-0.5B-Instruct`` gives: Qwen2ForCausalLM and Qwen2Tokenizer."""
    cfg = RunConfig(model={"name": str(checkpoint)})
    assert base_model_path(cfg) == (str(checkpoint), {"model": str(checkpoint)})
    hub = RunConfig(model={"name": "Qwen/Qwen2.5-0.5B-Instruct"})
    assert base_model_path(hub) == ("Qwen/Qwen2.5-0.5B-Instruct", {"model": "Qwen/Qwen2.5-0.5B-Instruct"})
    model, tok = load_model(str(checkpoint), cfg, init_seed=0)
    assert type(model).__name__ == "Qwen2ForCausalLM" and type(tok).__name__ == "Qwen2Tokenizer"
    c = model.config
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads) == (64, 2, 4, 2)
    assert c.vocab_size == len(tok) and c.eos_token_id == tok.eos_token_id == tok.convert_tokens_to_ids(
        IM_END
    )
    assert model.config.pad_token_id == tok.pad_token_id == tok.convert_tokens_to_ids(ENDOFTEXT)
    lora_cfg = RunConfig(model={"name": str(checkpoint), "lora": {"enabled": True, "r": 4}})
    lora, _ = load_model(str(checkpoint), lora_cfg, init_seed=0)
    assert any("lora_" in n for n, _ in lora.named_parameters())


def test_gold_pairs_put_the_gold_answer_against_the_worst_sample():
    samples = [
        {
            "id": "a",
            "question": "q",
            "answer": "#### 4",
            "completions": ["#### 4", "#### 5"],
            "scores": [1.0, 0.0],
        },
        {
            "id": "b",
            "question": "q",
            "answer": "#### 6",
            "completions": ["#### 1", "#### 2"],
            "scores": [0.0, 0.0],
        },
        {
            "id": "c",
            "question": "q",
            "answer": "#### 7",
            "completions": ["#### 7", "#### 7"],
            "scores": [1.0, 1.0],
        },
    ]
    pairs, stats = preference_pairs(samples, chosen_source="gold")
    assert [(p["id"], p["chosen"], p["rejected"]) for p in pairs] == [
        ("a", "#### 4", "#### 5"),
        ("b", "#### 6", "#### 1"),
    ]
    assert all(p["chosen_reward"] == 1.0 and p["rejected_reward"] == 0.0 for p in pairs)
    assert (stats["pairs"], stats["dropped_all_correct"], stats["dropped_all_wrong"]) == (2, 1, 0)
    best, _ = preference_pairs(samples)  # the default: only prompts whose samples differ
    assert [(p["id"], p["chosen"]) for p in best] == [("a", "#### 4")]
    with pytest.raises(ValueError, match="chosen_source"):
        preference_pairs(samples, chosen_source="best")


def grid_file(tmp_path: Path, checkpoint: Path) -> Path:
    """One grid of :data:`CELLS` (``variants``: one bundle per cell) with budgets of a few steps."""
    base = {
        "model": {"name": str(checkpoint)},
        "task": {"name": "gsm8k", "path": str(GSM8K)},
        # GSM8K prompts in the chat template run to ~440 tokens with this vocabulary (mean ~150)
        "data": {
            "n_train": N_TRAIN,
            "max_len": 512,
            "self_play_k": 2,
            "max_new_tokens": 16,
            "chosen_source": "gold",
        },
        "train": {
            "batch_size": 2,
            "max_steps": STEPS,
            "lr": 1e-4,
            "warmup_ratio": 0.0,
            "schedule": "constant",
        },
        # random rewards: a random model never answers right, and all-zero rewards would train nothing
        "online": {
            "n": 4,
            "prompts_per_batch": 2,
            "rounds": STEPS,
            "max_new_tokens": 16,
            "n_prompts": 8,
            "reward_grader": "random",
        },  # fmt: skip
        "eval": {"n_test": 4, "n_ood": 0, "k": 0, "max_new_tokens": 16},
        "track": [],
    }
    variants = [{"method": m, "train.zero_stage": z, **extra} for m, z, extra in CELLS]
    path = tmp_path / "realformat.yaml"
    path.write_text(yaml.safe_dump({"name": "realformat", "base": base, "variants": variants}))
    return path


def _finite(x) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


def check_cell(rec: dict, run_dir: Path) -> None:
    """A finished record with its metrics, the settings asked for, and training that moved the weights."""
    assert rec["status"] == "finished", (rec["run_id"], rec.get("error"), rec.get("traceback"))
    m = rec["metrics"]
    for key in ("accuracy", "accuracy_flexible", "chance", "final_loss", "base_accuracy"):
        assert _finite(m.get(key)), (rec["run_id"], key, m.get(key))
    assert m["n_test"] == 4 and rec["optimizer_steps"] == STEPS and rec["world_size"] == 1
    assert rec["config"]["model"]["name"] == rec["scale"]
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == list(range(1, STEPS + 1))
    assert all(_finite(s["loss"]) for s in steps)
    assert any(s["grad_norm"] > 0 for s in steps), rec["run_id"]  # a gradient reached the weights
    if rec["method"] in ("dpo", "kto"):  # gold against a sample: every prompt gives a pair
        assert rec["data"]["pairs"] == N_TRAIN and rec["data"]["dropped"] == 0
    online = rec["config"]["online"]
    if rec["method"] in ONLINE and online["source"] != "sync":
        assert steps[-1]["staleness_max"] == online["staleness"], (rec["run_id"], steps[-1])


@pytest.mark.slow
def test_every_paradigm_trains_the_real_checkpoint_through_one_grid(checkpoint, tmp_path):
    grid = grid_file(tmp_path, checkpoint)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "oxbench_cli", "run", "--grid", str(grid), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    records = {p.parent: json.loads(p.read_text()) for p in out.rglob("run.json")}
    assert len(records) == len(CELLS), proc.stdout[-3000:] + proc.stderr[-3000:]
    for run_dir, rec in records.items():
        check_cell(rec, run_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    asked = sorted(
        (m, z, bool(x.get("model.lora.enabled")), x.get("online.source", "sync")) for m, z, x in CELLS
    )
    got = sorted(
        (r["method"], r["config"]["train"]["zero_stage"], r["lora"], r["config"]["online"]["source"])
        for r in records.values()
    )
    assert got == asked
    check_zero_stages_agree(records)


def check_zero_stages_agree(records: dict[Path, dict]) -> None:
    """ZeRO-3 computes what ZeRO-0 does: each cell's first step (same data, same rollouts: the initial
    weights sampled both) has the same loss and gradient norm at either stage, up to float rounding."""
    first: dict[tuple, dict[int, dict]] = {}
    for run_dir, rec in records.items():
        c = rec["config"]
        arm = (rec["method"], rec["lora"], c["online"]["source"])
        step = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
        first.setdefault(arm, {})[c["train"]["zero_stage"]] = step
    pairs = {arm: by_stage for arm, by_stage in first.items() if set(by_stage) == {0, 3}}
    assert len(pairs) == 6, sorted(pairs)  # sft, dpo, kto, sgrpo, ppo, and sgrpo from the async source
    for arm, by_stage in pairs.items():
        for key in ("loss", "grad_norm"):
            z0, z3 = by_stage[0][key], by_stage[3][key]
            assert math.isclose(z0, z3, rel_tol=1e-5, abs_tol=1e-6), (arm, key, z0, z3)
