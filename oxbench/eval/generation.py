"""Batched generation with the KV cache, shared by the evaluator and the online loop."""

from __future__ import annotations

import torch

from oxbench.utils import progress


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
    return_finished: bool = False,
    progress_label: str | None = None,
) -> list[list]:
    """Completions for every prompt: ``out[i]`` has ``num_return_sequences`` strings.

    ``temperature == 0`` is greedy. With ``return_finished`` each item is ``(text, finished)``,
    ``finished`` telling whether the model emitted end-of-sequence (else it hit the length cap). Sampling is seeded by ``generator_seed`` (torch's global
    RNG is set from it before each batch, since HF ``generate`` draws from it).
    """
    was_training = model.training
    model.eval()
    tokenizer.padding_side = "left"
    results: list[list[str]] = []
    starts = range(0, len(prompts), batch_size)
    for start in progress(starts, progress_label or "", enabled=progress_label is not None):
        chunk = prompts[start : start + batch_size]
        enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
        enc = {k: v.to(model.device) for k, v in enc.items()}
        kwargs = dict(
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            use_cache=True,
            num_return_sequences=num_return_sequences,
        )
        if temperature > 0:
            if generator_seed is not None:
                torch.manual_seed(generator_seed + start)
            kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
        else:
            kwargs.update(do_sample=False)
        out = model.generate(**enc, **kwargs)
        new = out[:, enc["input_ids"].shape[1] :]
        finished = (new == tokenizer.eos_token_id).any(-1).tolist()
        texts = tokenizer.batch_decode(new, skip_special_tokens=True)
        items = list(zip(texts, finished)) if return_finished else texts
        for i in range(len(chunk)):
            results.append(items[i * num_return_sequences : (i + 1) * num_return_sequences])
    model.train(was_training)
    return results
