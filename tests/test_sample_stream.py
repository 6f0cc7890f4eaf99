"""Per-problem sampling streams (``eval.sample_stream: problem``, oxbench/text/streams.py): a problem's
draws are the same at any batch size and on either backend, follow softmax(logits / T), and the
historic per-call stream, pinned, keeps the committed run_ids."""

from __future__ import annotations

import torch
from conftest import make_micro_model
from test_lean_decode import PROMPTS, encode, tiny_m

from oxbench.config import RunConfig
from oxbench.eval.evaluate import sampled_metrics
from oxbench.text.decode import LeanDecoder
from oxbench.text.generation import sample
from oxbench.text.streams import ProblemStream, problem_key

KEYS = [problem_key(p) for p in PROMPTS]


def ids(model, tok, *, batch_size: int, backend: str, keys=KEYS, seed: int = 0) -> list[list[list[int]]]:
    out = sample(
        model,
        tok,
        PROMPTS,
        max_new_tokens=10,
        temperature=1.0,
        num_return_sequences=3,
        batch_size=batch_size,
        generator_seed=seed,
        backend=backend,
        stream_keys=keys,
    )
    return [[s.completion_ids for s in group] for group in out]


def test_a_problems_draws_do_not_depend_on_the_batch_or_the_backend():
    model, tok = tiny_m()
    runs = [ids(model, tok, batch_size=b, backend=be) for be in ("lean", "hf") for b in (1, 2, 3)]
    assert all(r == runs[0] for r in runs)
    assert ids(model, tok, batch_size=3, backend="lean", seed=1) != runs[0]  # another seed, other draws
    per_call = [ids(model, tok, batch_size=b, backend="lean", keys=None) for b in (1, 3)]
    assert per_call[0] != per_call[1]  # the historic stream: the batch changes the draws


def test_a_problems_draws_do_not_depend_on_its_neighbours():
    model, tok = tiny_m()
    alone = sample(
        model,
        tok,
        PROMPTS[1:2],
        max_new_tokens=10,
        temperature=1.0,
        num_return_sequences=3,
        batch_size=1,
        generator_seed=0,
        backend="lean",
        stream_keys=KEYS[1:2],
    )
    assert [s.completion_ids for s in alone[0]] == ids(model, tok, batch_size=3, backend="lean")[1]


@torch.no_grad()
def test_stream_samples_follow_softmax_at_temperature():
    model, tok = make_micro_model(seed=1)
    model.eval()
    tok.padding_side = "left"
    enc = encode(tok, ["ab"])
    logits = model(**enc).logits[0, -1]
    for temp in (0.7, 1.5):
        stream = ProblemStream(0, [problem_key("ab")], 20000, 1, torch.device("cpu"))
        new, _ = LeanDecoder(model).sample(
            enc["input_ids"],
            enc["attention_mask"],
            n=20000,
            max_new_tokens=1,
            temperature=temp,
            eos_id=tok.eos_token_id,
            generator=stream,
        )
        freq = torch.bincount(new[:, 0], minlength=logits.shape[0]).float() / 20000
        assert (freq - torch.softmax(logits / temp, -1)).abs().sum() / 2 < 0.03  # total variation


def test_the_sampled_metrics_are_the_same_at_any_batch_size():
    model, tok = tiny_m()
    rows = [{"id": f"p{i}", "question": f"{i} + 2?", "answer": str(i + 2)} for i in range(6)]

    def counts(size: int | None, stream: str) -> list[int]:
        cfg = RunConfig(
            eval={
                "batch_size": size,
                "sample_stream": stream,
                "k": 2,
                "n_samples": 4,
                "max_new_tokens": 8,
                "sampled_grader": "flexible",
            }
        )
        return sampled_metrics(model, tok, rows, cfg, seed=3, per_problem=True)["correct_counts"]

    assert counts(None, "problem") == counts(4, "problem") == counts(8, "problem")


def test_per_problem_is_the_default_and_pinning_call_keeps_the_old_run_ids():
    assert RunConfig().eval.sample_stream == "problem"
    pinned = RunConfig(eval={"sample_stream": "call"})
    assert "sample_stream" not in pinned.identity()["eval"]
    assert RunConfig().run_id() != pinned.run_id()
