"""Batched generation with the KV cache: text for the evaluator, sampled ids and log-probs for rollouts."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from oxbench.text import decode, streams
from oxbench.utils import progress


def _generate_kwargs(tokenizer, max_new_tokens: int, temperature: float, top_p: float, n: int) -> dict:
    """HF ``generate`` arguments: plain temperature sampling (``top_k=0``), or greedy at ``temperature == 0``."""
    kwargs = dict(
        max_new_tokens=max_new_tokens,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        use_cache=True,
        num_return_sequences=n,
    )
    if temperature > 0:
        return {**kwargs, "do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0}
    return {**kwargs, "do_sample": False}


def _batches(model, tokenizer, prompts: list[str], batch_size: int, temperature: float, seed, label):
    """The encoded prompt batches, with the model in eval mode (restored after) and left padding.

    Before each sampled batch torch's global RNG is set from ``seed`` (HF ``generate`` draws from it),
    so a batch's samples depend on the seed and the batch's position only. ``label`` prints progress.
    """
    was_training = model.training
    model.eval()
    tokenizer.padding_side = "left"
    try:
        for start in progress(range(0, len(prompts), batch_size), label or "", enabled=label is not None):
            chunk = prompts[start : start + batch_size]
            enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
            if temperature > 0 and seed is not None:
                torch.manual_seed(seed + start)
            yield {k: v.to(model.device) for k, v in enc.items()}
    finally:
        model.train(was_training)


@torch.no_grad()
def generate(
    model,
    tokenizer,
    prompts: list[str],
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    num_return_sequences: int = 1,
    batch_size: int = 64,
    generator_seed: int | None = None,
    top_p: float = 1.0,
    progress_label: str | None = None,
    backend: str = "hf",
    stream_keys: list[int] | None = None,
) -> list[list[str]]:
    """Completions for every prompt: ``out[i]`` has ``num_return_sequences`` strings.

    ``temperature == 0`` is greedy. Sampling is seeded by ``generator_seed`` (see :func:`_batches`).
    ``backend="lean"`` decodes with :class:`oxbench.text.decode.LeanDecoder` (greedy ids equal HF's;
    samples follow the same distribution from another random stream). ``stream_keys`` (one per prompt,
    :func:`oxbench.text.streams.problem_key`): each prompt's samples come from its own stream, the same
    at any ``batch_size`` and on either backend (:mod:`oxbench.text.streams`).
    """
    n = num_return_sequences
    if backend == "lean" or (stream_keys is not None and temperature > 0):
        samples = sample(
            model,
            tokenizer,
            prompts,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            num_return_sequences=n,
            batch_size=batch_size,
            generator_seed=generator_seed or 0,
            top_p=top_p,
            backend=backend,
            stream_keys=stream_keys,
        )
        return [
            tokenizer.batch_decode([s.completion_ids for s in group], skip_special_tokens=True)
            for group in samples
        ]
    kwargs = _generate_kwargs(tokenizer, max_new_tokens, temperature, top_p, n)
    results: list[list[str]] = []
    for enc in _batches(model, tokenizer, prompts, batch_size, temperature, generator_seed, progress_label):
        out = model.generate(**enc, **kwargs)
        texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        results += [texts[i * n : (i + 1) * n] for i in range(len(enc["input_ids"]))]
    return results


@dataclass
class Sample:
    """One sampled sequence exactly as generated (the ids the trainer must train on)."""

    prompt_ids: list[int]  # the prompt's tokens, left padding removed
    completion_ids: list[int]  # through the first end-of-sequence token if any, no padding after it
    logps: list[float]  # per completion token: log p(token | prefix) at temperature 1, same weights
    finished: bool  # emitted end-of-sequence (else cut at max_new_tokens)


def cut_at_eos(row: list[int], eos_id: int) -> tuple[list[int], bool]:
    """The sampled tokens through the first end-of-sequence (the padding after it dropped)."""
    if eos_id in row:
        return row[: row.index(eos_id) + 1], True
    return row, False


def _sampled_logps(step_logits: tuple[torch.Tensor, ...], new: torch.Tensor) -> torch.Tensor:
    """(B, W) temperature-1 log-prob of each generated token, from HF's unprocessed per-step logits."""
    cols = [
        logits.float().log_softmax(-1).gather(1, new[:, s : s + 1]) for s, logits in enumerate(step_logits)
    ]
    return torch.cat(cols, 1)


@torch.no_grad()
def sample(
    model,
    tokenizer,
    prompts: list[str],
    *,
    max_new_tokens: int,
    temperature: float,
    num_return_sequences: int,
    batch_size: int,
    generator_seed: int,
    top_p: float = 1.0,
    backend: str = "hf",
    stream_keys: list[int] | None = None,
) -> list[list[Sample]]:
    """Like :func:`generate` (same batching and seeding), but each item is a :class:`Sample`: the ids as
    sampled and their log-probs captured from the generation pass itself.

    The log-probs are taken from the *unprocessed* logits, i.e. at temperature 1, whatever
    ``temperature`` the sampler used. The losses compare them with the trainer's log-probs, which are
    temperature-1 log-probs, so on the weights that sampled every ratio is 1 (up to the rounding that
    separates a cached decoding step from a full forward). Behaviour log-probs at temperature T would
    make on-policy ratios differ from 1 by the temperature alone.

    ``backend``: ``hf`` is HF ``generate`` (``output_logits=True``); ``lean`` is
    :class:`oxbench.text.decode.LeanDecoder` (the same model, its own decode loop, each prompt prefilled
    once; plain temperature sampling, Qwen2/Llama models only: anything else is a ValueError).
    ``stream_keys``: per-prompt streams, as for :func:`generate`.
    """
    n = num_return_sequences
    lean = backend == "lean"
    if lean and (top_p < 1.0 or not decode.supports(model)):
        raise ValueError(
            f"the lean backend samples Qwen2/Llama models at top_p 1, not {type(model).__name__}"
        )
    if stream_keys is not None and (top_p < 1.0 or len(stream_keys) != len(prompts)):
        raise ValueError(f"per-prompt streams need top_p 1 and one key per prompt ({len(prompts)} prompts)")
    decoder = decode.LeanDecoder(model) if lean else None  # its fused weights are built once a call
    results: list[list[Sample]] = []
    for start, enc in enumerate(
        _batches(model, tokenizer, prompts, batch_size, temperature, generator_seed, None)
    ):
        draws = _draws(enc, start * batch_size, generator_seed, stream_keys, n, max_new_tokens)
        if decoder is not None:
            new, logps = decoder.sample(
                enc["input_ids"],
                enc["attention_mask"],
                n=n,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                eos_id=tokenizer.eos_token_id,
                generator=draws,
            )
        else:
            new, logps = _hf_sample(model, tokenizer, enc, draws, n, max_new_tokens, temperature, top_p)
        results += _to_samples(new, logps, enc, tokenizer.eos_token_id, n)
    return results


def _draws(enc: dict, first: int, seed: int, keys: list[int] | None, n: int, steps: int):
    """A batch's randomness: its prompts' own streams, or one generator for the call (seeded by the
    batch's first prompt)."""
    dev = enc["input_ids"].device
    if keys is None:
        return torch.Generator(dev).manual_seed(seed + first)
    return streams.ProblemStream(seed, keys[first : first + len(enc["input_ids"])], n, steps, dev)


def _hf_sample(
    model, tokenizer, enc: dict, draws, n: int, max_new_tokens: int, temperature: float, top_p: float
):
    """``(new_ids, logps)`` from HF ``generate``: its own sampler (torch's global RNG, seeded by
    :func:`_batches`), or a :class:`~oxbench.text.streams.ProblemStream`'s draws through greedy search
    (each prompt repeated ``n`` times, as greedy search returns one sequence a row)."""
    if isinstance(draws, streams.ProblemStream) and temperature > 0:
        from transformers import LogitsProcessorList

        enc = {k: v.repeat_interleave(n, 0) for k, v in enc.items()}
        proc = streams.StreamProcessor(draws, enc["input_ids"].shape[1], temperature)
        kwargs = {
            **_generate_kwargs(tokenizer, max_new_tokens, 0.0, top_p, 1),
            "logits_processor": LogitsProcessorList([proc]),
        }
    else:
        kwargs = _generate_kwargs(tokenizer, max_new_tokens, temperature, top_p, n)
    out = model.generate(**enc, **kwargs, return_dict_in_generate=True, output_logits=True)
    new = out.sequences[:, enc["input_ids"].shape[1] :]
    return new, _sampled_logps(out.logits, new)


def _to_samples(new: torch.Tensor, logps: torch.Tensor, enc: dict, eos_id: int, n: int) -> list[list[Sample]]:
    """Per prompt of the batch, its ``n`` :class:`Sample` (a prompt's sequences are consecutive). The
    batch comes to the host in one copy of each tensor (a constant number of waits per batch), then is
    cut on the host."""
    new, logps, prompts, mask = (t.cpu() for t in (new, logps, enc["input_ids"], enc["attention_mask"]))
    logps = logps.tolist()
    prompt_ids = [ids[m.bool()].tolist() for ids, m in zip(prompts, mask)]
    items = []
    for j, row in enumerate(new.tolist()):
        ids, done = cut_at_eos(row, eos_id)
        items.append(Sample(prompt_ids[j // n], ids, logps[j][: len(ids)], done))
    return [items[i * n : (i + 1) * n] for i in range(len(prompt_ids))]
