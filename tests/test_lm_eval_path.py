"""Tests for oxbench.eval.lm_eval_path: lm-eval on an in-memory tiny model over the bundled task."""

from __future__ import annotations

import json
from pathlib import Path

import lm_eval.tasks
import pytest
import torch
import yaml
from lm_eval.tasks._yaml_loader import load_yaml
from transformers import Qwen2Config, Qwen2ForCausalLM

from oxbench.eval import lm_eval_path
from oxbench.eval.lm_eval_path import (
    TASKS_DIR,
    build_task_manager,
    evaluate_with_lm_eval,
    load_local_gsm8k,
    resolve_gsm8k_file,
    run_lm_eval,
    summarize_results,
)
from oxbench.models.tokenizer import build_char_tokenizer
from oxbench.tasks.errors import TaskFileNotFoundError
from oxbench.tasks.grading import is_correct
from oxbench.tasks.gsm8k import default_gsm8k_dir
from oxbench.tasks.lm_eval_tasks import bundled

TASK = "oxbench_gsm8k_local"
GSM8K_TEST = default_gsm8k_dir() / "test.jsonl"
needs_gsm8k = pytest.mark.skipif(not GSM8K_TEST.is_file(), reason=f"GSM8K data not at {GSM8K_TEST}")
FILTER_MODES = {"strict-match": "strict", "flexible-extract": "flexible"}
LM_EVAL_GSM8K_YAML = Path(lm_eval.tasks.__file__).parent / "gsm8k" / "gsm8k.yaml"


@pytest.fixture(scope="module")
def tok():
    tokenizer = build_char_tokenizer()
    tokenizer.padding_side = "left"  # HFLM pads generation batches on the left
    return tokenizer


def tiny_qwen(tok) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=32,
        vocab_size=len(tok),
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=False,
    )
    return Qwen2ForCausalLM(config)


def bigram_qwen(tok, chain: dict[str, str]) -> Qwen2ForCausalLM:
    """A tiny Qwen2 whose greedy next token depends on the current token only: ``chain[c]`` follows ``c``.

    With attention's o_proj and the MLP's down_proj zeroed, each block adds nothing, so the last
    hidden state is RMSNorm(embedding of the current token). Token ``c`` (k-th key) embeds as the
    basis vector e_k, which RMSNorm maps to 4·e_k (rms of a one-hot in 16 dims is 1/4), and the
    lm_head row of ``chain[c]`` is 10·e_k: its logit is 40, every other logit is 0.
    """
    model = tiny_qwen(tok)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.embed_tokens.weight.zero_()
        model.lm_head.weight.zero_()
        for k, (current, following) in enumerate(chain.items()):
            model.model.embed_tokens.weight[tok.convert_tokens_to_ids(current), k] = 1.0
            model.lm_head.weight[tok.convert_tokens_to_ids(following), k] += 10.0
    return model


def samples_by_filter(results: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for sample in results["samples"][TASK]:
        out.setdefault(sample["filter"], []).append(sample)
    return out


def assert_our_grading_matches(results: dict) -> list[bool]:
    """Per response, oxbench's is_correct equals lm-eval's exact_match, for both filters."""
    verdicts = []
    for filter_name, samples in samples_by_filter(results).items():
        for sample in samples:
            ours = is_correct(sample["resps"][0][0], sample["target"], FILTER_MODES[filter_name])
            assert ours == bool(sample["exact_match"]), (filter_name, sample["resps"])
            verdicts.append(ours)
    return verdicts


# ---------------------------------------------------------------- the bundled YAML


def test_bundled_task_matches_lm_eval_gsm8k():
    """Same prompt, target, metric and filters as lm-eval's gsm8k task; our stop strings and loader."""
    ours = load_yaml(TASKS_DIR / f"{TASK}.yaml", resolve_func=True)
    theirs = yaml.safe_load(LM_EVAL_GSM8K_YAML.read_text())
    assert ours["task"] == TASK
    for key in ("doc_to_text", "doc_to_target", "metric_list", "filter_list", "output_type", "test_split"):
        assert ours[key] == theirs[key], key
    assert ours["doc_to_text"] == "Question: {{question}}\nAnswer:"
    assert ours["generation_kwargs"]["until"] == ["\n\n", "Question:"]
    assert ours["custom_dataset"] is load_local_gsm8k
    assert ours["num_fewshot"] == 0


def test_task_manager_skips_lm_eval_index_when_not_needed(tmp_path):
    (tmp_path / "mine.yaml").write_text(f"include: {TASKS_DIR / (TASK + '.yaml')}\ntask: my_gsm8k_copy\n")
    manager = build_task_manager([TASK, "my_gsm8k_copy"], task_dir=tmp_path)
    assert sorted(manager.all_tasks) == sorted(["my_gsm8k_copy", *bundled()])


# ---------------------------------------------------------------- data file resolution


def test_resolve_order(tmp_path, monkeypatch):
    mine, env = tmp_path / "mine.jsonl", tmp_path / "env.jsonl"
    mine.write_text("{}\n")
    env.write_text("{}\n")
    monkeypatch.setenv(lm_eval_path.GSM8K_FILE_ENV, str(env))
    assert resolve_gsm8k_file(mine) == mine
    assert resolve_gsm8k_file() == env
    monkeypatch.delenv(lm_eval_path.GSM8K_FILE_ENV)
    if lm_eval_path.DEFAULT_GSM8K_FILE.exists():
        assert resolve_gsm8k_file() == lm_eval_path.DEFAULT_GSM8K_FILE
    else:
        with pytest.raises(FileNotFoundError, match="test.jsonl"):
            resolve_gsm8k_file()


def test_resolve_missing_names_path_and_remedy(tmp_path, monkeypatch):
    monkeypatch.setenv(lm_eval_path.GSM8K_FILE_ENV, str(tmp_path / "gone.jsonl"))
    with pytest.raises(TaskFileNotFoundError, match=r"gone\.jsonl \(\$OXBENCH_GSM8K_FILE\).*data_file="):
        resolve_gsm8k_file()
    with pytest.raises(FileNotFoundError, match=r"other\.jsonl \(data_file\)"):
        resolve_gsm8k_file(tmp_path / "other.jsonl")


def test_custom_dataset_hook_reads_env_file(tmp_path, monkeypatch):
    path = tmp_path / "small.jsonl"
    path.write_text(json.dumps({"question": "q?", "answer": "#### 3"}) + "\n")
    monkeypatch.setenv(lm_eval_path.GSM8K_FILE_ENV, str(path))
    dataset = load_local_gsm8k(version=1.0)["test"]
    assert dataset.to_list() == [{"question": "q?", "answer": "#### 3", "id": "gsm8k-test-0"}]


@needs_gsm8k
def test_default_file_is_the_shared_test_split():
    assert lm_eval_path.DEFAULT_GSM8K_FILE.resolve() == GSM8K_TEST.resolve()


def test_summarize_results_keeps_numbers_only():
    raw = {"results": {TASK: {"alias": TASK, "exact_match,strict-match": 0.25, "x_stderr,none": "N/A"}}}
    assert summarize_results(raw) == {TASK: {"exact_match,strict-match": 0.25}}
    assert summarize_results(None) == {}


# ---------------------------------------------------------------- end to end on a tiny model


@needs_gsm8k
def test_random_tiny_qwen_on_real_test_file(tok, monkeypatch):
    monkeypatch.delenv(lm_eval_path.GSM8K_FILE_ENV, raising=False)
    model = tiny_qwen(tok)
    model.train()
    results = run_lm_eval(model, tok, [TASK], limit=4, batch_size=4, max_gen_toks=8, log_samples=True)
    assert model.training  # HFLM's model.eval() is undone
    scores = summarize_results(results)[TASK]
    for key in ("exact_match,strict-match", "exact_match,flexible-extract"):
        assert 0.0 <= scores[key] <= 1.0
    assert scores["sample_len"] == 4
    by_filter = samples_by_filter(results)
    assert sorted(by_filter) == ["flexible-extract", "strict-match"]
    assert [s["doc"]["id"] for s in by_filter["strict-match"]] == [f"gsm8k-test-{i}" for i in range(4)]
    prompt = by_filter["strict-match"][0]["arguments"][0][0]
    assert prompt.startswith("Question: Janet") and prompt.endswith("\nAnswer:")
    assert_our_grading_matches(results)


def test_bigram_model_scores_exactly(tok, tmp_path):
    """The wired model answers '42' (then a blank line) to every prompt ending in 'Answer:'.

    Data: references 42, 41, 4,2 → flexible-extract gets 2/3 (42 and 4,2 are 42), strict-match 0
    (no '#### '). Graded through data_file= (TaskManager metadata) and the public wrapper.
    """
    path = tmp_path / "wired.jsonl"
    answers = ["6 * 7 = 42\n#### 42", "#### 41", "#### 4,2"]
    path.write_text(
        "".join(json.dumps({"question": f"Q{i}?", "answer": a}) + "\n" for i, a in enumerate(answers))
    )
    model = bigram_qwen(tok, {":": "4", "4": "2", "2": "\n", "\n": "\n"})
    kwargs = dict(data_file=path, batch_size=2, max_gen_toks=6)
    scores = evaluate_with_lm_eval(model, tok, [TASK], **kwargs)[TASK]
    assert scores["exact_match,flexible-extract"] == pytest.approx(2 / 3)
    assert scores["exact_match,strict-match"] == 0.0
    results = run_lm_eval(model, tok, [TASK], log_samples=True, **kwargs)
    assert {s["resps"][0][0] for s in results["samples"][TASK]} == {"42"}
    assert sorted(assert_our_grading_matches(results)) == [False] * 4 + [True] * 2


def test_lm_eval_s_index_is_read_once_per_install(tmp_path, monkeypatch):
    """Checking a task oxbench does not bundle reads lm-eval's index (~14,000 YAMLs) once; its names are
    then kept in the cache under lm-eval's version and the bundled YAMLs, so later plans are instant."""
    monkeypatch.setenv("OXBENCH_CACHE", str(tmp_path / "cache"))
    built = []

    class Manager:
        all_tasks = ["hellaswag", "arc_easy", *bundled()]

    def build(tasks, *args, **kwargs):
        built.append(list(tasks))
        return Manager()

    monkeypatch.setattr(lm_eval_path, "build_task_manager", build)
    assert lm_eval_path.known_tasks() == set(Manager.all_tasks)
    assert lm_eval_path.known_tasks() == set(Manager.all_tasks) and len(built) == 1  # from the cache
    lm_eval_path.check_tasks.cache_clear()
    with pytest.raises(ValueError, match="unknown lm-eval task 'hellaswg'; did you mean 'hellaswag'"):
        lm_eval_path.check_tasks(("hellaswg",))
    assert len(built) == 1
    monkeypatch.setattr(lm_eval_path, "TASKS_DIR", tmp_path)  # other bundled YAMLs: another index
    (tmp_path / "extra.yaml").write_text("task: extra\n")
    lm_eval_path.known_tasks()
    assert len(built) == 2
