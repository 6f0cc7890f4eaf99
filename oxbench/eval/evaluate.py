"""The evaluator every arm shares: greedy accuracy (strict and flexible), sampled @k, OOD.

* ``accuracy``: greedy decoding, strict ``#### N`` exact match (the reference study's metric);
  ``accuracy_flexible``: the last number in the completion (lm-eval's flexible-extract).
* ``avg_at_k``: mean per-sample accuracy; ``best_at_k``: unbiased pass@k (Chen et al. 2021,
  ``1 - C(n-c, k) / C(n, k)``); ``worst_at_k``: the probability that all ``k`` samples are
  correct, ``C(c, k) / C(n, k)``; from ``n`` samples per problem with ``c`` correct.
* ``ood_accuracy``: greedy strict accuracy on the out-of-distribution variant of the task.
* ``accuracy_verified``: strict-correct *and* every line of working right (the right operation on
  the right numbers with the right result), for tasks whose working can be checked (``arith``);
  ``None`` otherwise. A wrong working that lands on the right number counts in ``accuracy`` only.
* ``lmeval_<task>`` (with ``_chance`` and ``_n``): ``eval.lm_eval``'s tasks through lm-eval's harness
  (:func:`oxbench.eval.lm_eval_path.lm_eval_metrics`), e.g. the general-domain and harder in-domain tasks.
* ``chance`` (and ``ood_chance``): the accuracy of guessing each answer from the training
  answers' distribution, the floor any accuracy should be read against.
"""

from __future__ import annotations

from math import comb

from oxbench.config import RunConfig
from oxbench.tasks import get_task, load_task_split, verify_working
from oxbench.tasks.errors import TaskError
from oxbench.tasks.registry import reserved_metric
from oxbench.text import decode
from oxbench.text.generation import generate
from oxbench.text.streams import problem_key


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct."""
    if n < k:
        raise ValueError(f"pass@k needs n >= k (n={n}, k={k})")
    return 1.0 - comb(n - c, k) / comb(n, k)


def all_at_k(n: int, c: int, k: int) -> float:
    """Unbiased probability that k samples drawn without replacement are all correct."""
    if n < k:
        raise ValueError(f"worst@k needs n >= k (n={n}, k={k})")
    return comb(c, k) / comb(n, k)


def test_rows(cfg: RunConfig) -> list[dict]:
    """The graded problems: ``eval.n_test`` of the test split, or of the locked confirmation split."""
    return load_task_split(cfg.task.model_dump(), cfg.eval.split, n=cfg.eval.n_test, seed=0)


def ood_rows(cfg: RunConfig) -> list[dict]:
    """The out-of-distribution variant's test rows, for a task that has one (``arith``)."""
    ood = get_task(cfg.task.name).ood
    if ood is None or not cfg.task.ood:
        return []
    return load_task_split(ood(cfg.task.model_dump()), "test", n=cfg.eval.n_ood, seed=0)


def task_metrics(cfg: RunConfig, rows: list[dict], completions: list[str]) -> dict:
    """The task's own evaluation metrics (its spec's ``metrics``) of the greedy completions of ``rows``;
    a name the evaluator already writes is an error."""
    spec = get_task(cfg.task.name)
    if spec.metrics is None:
        return {}
    out = dict(spec.metrics(rows, completions))
    taken = [k for k in out if reserved_metric(k)]
    if taken:
        raise TaskError(f"task {spec.name!r}: metric {taken[0]!r} is one the evaluator writes")
    return out


def eval_backend(cfg: RunConfig, model) -> str:
    """The decoder evaluation uses: ``eval.backend``, except that ``lean`` on a model its loop cannot
    decode (a LoRA model, an architecture other than Qwen2/Llama) is HF generate; the record says which."""
    return decode.backend_for(cfg.eval.backend, model)


EVAL_BUDGET = 2 * 2**30  # bytes of KV cache and per-step logits one evaluation call may hold
EVAL_MAX_SEQS = 1024  # beyond this, a call gains little and pads more


def eval_sequences(config, seq_len: int, dtype: str, budget: int = EVAL_BUDGET) -> int:
    """Sequences per evaluation call (``eval.batch_size: null``) for a model of Hugging Face ``config``:
    each holds its KV cache for ``seq_len`` tokens (prompt + new, padded) and one step's fp32 logits;
    at most :data:`EVAL_MAX_SEQS`."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv = 2 * config.num_hidden_layers * kv_heads * head_dim * (2 if dtype == "bf16" else 4) * seq_len
    return max(1, min(EVAL_MAX_SEQS, budget // (kv + config.vocab_size * 4)))


def eval_batch_size(cfg: RunConfig, model) -> int:
    """Sequences per generation call: ``eval.batch_size``, or the memory rule's number when it is None."""
    if cfg.eval.batch_size is not None:
        return cfg.eval.batch_size
    seq_len = cfg.data.max_len + cfg.eval.max_new_tokens  # the padded worst case of prompt + completion
    return eval_sequences(model.config, seq_len, cfg.model.dtype)


def greedy_completions(model, tokenizer, rows: list[dict], cfg: RunConfig, progress: str | None) -> list[str]:
    """One greedy completion per row (``eval.max_new_tokens``, :func:`eval_batch_size`, the evaluation's
    decoder); ``progress`` labels the progress lines (None: silent)."""
    prompt = get_task(cfg.task.name).prompt
    return [
        o[0]
        for o in generate(
            model,
            tokenizer,
            [prompt(tokenizer, r["question"]) for r in rows],
            max_new_tokens=cfg.eval.max_new_tokens,
            batch_size=eval_batch_size(cfg, model),
            progress_label=progress,
            backend=eval_backend(cfg, model),
        )
    ]


def greedy_outcomes(model, tokenizer, rows: list[dict], cfg: RunConfig, label: str | None = None) -> dict:
    """Greedy completions of ``rows`` and, per problem, strict, flexible and verified correctness."""
    task, grade = cfg.task.model_dump(), get_task(cfg.task.name).grade
    greedy = greedy_completions(
        model, tokenizer, rows, cfg, label and f"{label}: greedy, {len(rows)} problems"
    )
    strict = [grade(c, r["answer"], "strict") for c, r in zip(greedy, rows)]
    flexible = [grade(c, r["answer"], "flexible") for c, r in zip(greedy, rows)]
    working = [verify_working(task, c, r["answer"]) for c, r in zip(greedy, rows)]
    verified = [None if w is None else bool(s and w) for s, w in zip(strict, working)]
    return {
        "completions": greedy,
        "strict": strict,
        "flexible": flexible,
        "working": working,
        "verified": verified,
    }


def greedy_metrics(g: dict) -> dict:
    """Accuracies from :func:`greedy_outcomes` (verified ones None where working cannot be checked)."""
    m = len(g["strict"])
    checkable = all(v is not None for v in g["verified"])
    return {
        "accuracy": sum(g["strict"]) / m,
        "accuracy_flexible": sum(g["flexible"]) / m,
        "accuracy_verified": sum(g["verified"]) / m if checkable else None,
        "accuracy_verified_flexible": (
            sum(bool(f and w) for f, w in zip(g["flexible"], g["working"])) / m if checkable else None
        ),
    }


def validation_metrics(model, tokenizer, rows: list[dict], cfg: RunConfig, *, seed: int) -> dict:
    """One learning-curve point on the validation ``rows``: greedy strict/flexible/verified accuracy,
    avg/best/worst@k over every row, and each row's count of correct samples (``correct_counts``, for
    paired tests over problems)."""
    out = greedy_metrics(greedy_outcomes(model, tokenizer, rows, cfg))
    if cfg.eval.k > 0:
        out.update(sampled_metrics(model, tokenizer, rows, cfg, seed=seed, per_problem=True))
    return out


def evaluate(
    model, tokenizer, cfg: RunConfig, *, seed: int, label: str | None = None
) -> tuple[dict, list[dict]]:
    """(metrics, per-problem outcomes) for one trained model; ``label`` prints progress lines."""
    e, spec = cfg.eval, get_task(cfg.task.name)
    rows = test_rows(cfg)
    task = cfg.task.model_dump()
    g = greedy_outcomes(model, tokenizer, rows, cfg, label)
    greedy, strict, flexible, verified = g["completions"], g["strict"], g["flexible"], g["verified"]
    chance = spec.chance(task, rows) if spec.chance else None
    metrics = {**greedy_metrics(g), "chance": chance, "n_test": len(rows)}
    metrics.update(task_metrics(cfg, rows, greedy))
    outcomes = [
        {
            "id": r["id"],
            "split": "test",
            "correct": s,
            "correct_flexible": f,
            "verified": v,
            "completion": c,
        }
        for r, s, f, v, c in zip(rows, strict, flexible, verified, greedy)
    ]
    ood = ood_rows(cfg)
    if ood:
        comps = greedy_completions(model, tokenizer, ood, cfg, label and f"{label}: OOD, {len(ood)} problems")
        ok = [spec.grade(c, r["answer"]) for c, r in zip(comps, ood)]
        metrics["ood_accuracy"] = sum(ok) / len(ood)
        metrics["ood_chance"] = spec.chance(spec.ood(task), ood) if spec.chance else None
        metrics["n_ood"] = len(ood)
        outcomes += [
            {
                "id": r["id"],
                "split": "ood",
                "correct": s,
                "correct_flexible": spec.grade(c, r["answer"], "flexible"),
                "completion": c,
            }
            for r, s, c in zip(ood, ok, comps)
        ]
    else:
        metrics["ood_accuracy"] = None
    if e.k > 0:
        metrics.update(sampled_metrics(model, tokenizer, rows[: e.n_sampled], cfg, seed=seed, label=label))
    if e.lm_eval.tasks:  # general-domain and harder tasks through lm-eval's harness
        from oxbench.eval.lm_eval_path import lm_eval_metrics

        metrics.update(lm_eval_metrics(model, tokenizer, cfg))
    return metrics, outcomes


def sampled_metrics(
    model,
    tokenizer,
    rows: list[dict],
    cfg: RunConfig,
    *,
    seed: int,
    label: str | None = None,
    per_problem: bool = False,
) -> dict:
    e, spec = cfg.eval, get_task(cfg.task.name)
    n, k = max(e.n_samples, e.k), e.k
    prompts = [spec.prompt(tokenizer, r["question"]) for r in rows]
    outs = generate(
        model,
        tokenizer,
        prompts,
        max_new_tokens=e.max_new_tokens,
        temperature=e.temperature,
        num_return_sequences=n,
        batch_size=max(1, eval_batch_size(cfg, model) // n),
        generator_seed=seed,
        progress_label=label and f"{label}: sampled, {len(rows)} problems x {n}",
        backend=eval_backend(cfg, model),
        stream_keys=[problem_key(r.get("id", r["question"])) for r in rows]
        if e.sample_stream == "problem"
        else None,
    )
    counts = [
        sum(spec.grade(c, r["answer"], e.sampled_grader) for c in comps) for comps, r in zip(outs, rows)
    ]
    m = len(rows)
    return {
        f"avg_at_{k}": sum(c / n for c in counts) / m,
        f"best_at_{k}": sum(pass_at_k(n, c, k) for c in counts) / m,
        f"worst_at_{k}": sum(all_at_k(n, c, k) for c in counts) / m,
        "sampled_problems": m,
        "samples_per_problem": n,
    } | ({"correct_counts": counts} if per_problem else {})
