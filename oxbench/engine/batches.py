"""From examples to :class:`losses.LossInputs`, one small builder per data kind.

An example is a dict with an ``id`` and one tokenised sequence ``(ids, prompt_len)`` per
*role*: ``main`` for SFT, ``chosen``/``rejected`` for pairs, ``main``/``kl`` for unpaired
data (``kl`` pairs the prompt with an unrelated completion, KTO's KL estimate). The trainer
picks the builder from the loss's declared ``data`` kind, never from its name.
"""

from __future__ import annotations

import random

import torch

from losses import LossInputs
from oxbench.text.batching import collate, encode_pair, token_logps
from oxbench.text.formatting import format_completion, format_prompt

ROLES = {"sft": ("main",), "pairs": ("chosen", "rejected"), "unpaired": ("main", "kl")}


def encode_examples(
    kind: str, rows: list[dict], tokenizer, max_len: int, *, kl_seed: int = 0, prompt=format_prompt
) -> list[dict]:
    """Tokenise rows of one data kind into role sequences, each question's prompt written by ``prompt``
    (the task's format, :class:`~oxbench.tasks.registry.TaskSpec`)."""

    def enc(row, completion):
        if "prompt" in row:  # a data file's row (oxbench.data.formats): prompt and completion are text
            return encode_pair(tokenizer, row["prompt"], completion, max_len)
        return encode_pair(
            tokenizer,
            prompt(tokenizer, row["question"]),
            format_completion(tokenizer, completion),
            max_len,
        )

    if kind == "sft":
        return [{"id": r["id"], "main": enc(r, r["completion"])} for r in rows]
    if kind == "pairs":
        return [
            {
                "id": r["id"],
                "chosen": enc(r, r["chosen"]),
                "rejected": enc(r, r["rejected"]),
                "chosen_reward": r.get("chosen_reward"),
                "rejected_reward": r.get("rejected_reward"),
            }
            for r in rows
        ]
    if kind == "unpaired":
        # KL partner: a fixed, seeded derangement over the dataset, so the reference side can be cached.
        perm = list(range(len(rows)))
        random.Random(kl_seed).shuffle(perm)
        partner = {perm[j]: perm[(j + 1) % len(perm)] for j in range(len(perm))}
        return [
            {
                "id": r["id"],
                "label": bool(r["label"]),
                "main": enc(r, r["completion"]),
                "kl": enc(r, rows[partner[i]]["completion"]),
            }
            for i, r in enumerate(rows)
        ]
    raise ValueError(f"no offline batch builder for data kind {kind!r}")


def _forward_roles(model, chunk: list[dict], roles: tuple[str, ...], pad_id: int, full_logits: bool):
    """One forward over every role of the chunk; returns {role: (logp, mask[, logits])} and the batches."""
    seqs = [e[r] for r in roles for e in chunk]
    batch = collate(seqs, pad_id)
    res = token_logps(model, batch, return_logits=full_logits)
    b = len(chunk)
    split = {r: tuple(t[i * b : (i + 1) * b] for t in res) for i, r in enumerate(roles)}
    batches = {r: {k: v[i * b : (i + 1) * b] for k, v in batch.items()} for i, r in enumerate(roles)}
    return split, batches


def build_offline_inputs(
    kind: str,
    model,
    chunk: list[dict],
    pad_id: int,
    *,
    ref_cache=None,
    live_ref=None,
    needs_full_logits: bool = False,
    kl_pairs: bool = True,
) -> LossInputs:
    """Policy forward (with grad) plus reference values for one micro-batch; for unpaired data, the
    mismatched pairs' (no grad) only when ``kl_pairs`` (the loss reads them)."""
    ids = [e["id"] for e in chunk]
    if kind == "unpaired":
        grad_roles, nograd_roles = ("main",), (("kl",) if kl_pairs else ())
    else:
        grad_roles, nograd_roles = ROLES[kind], ()
    pol, batches = _forward_roles(model, chunk, grad_roles, pad_id, needs_full_logits)
    if nograd_roles:
        with torch.no_grad():
            extra, extra_batches = _forward_roles(model, chunk, nograd_roles, pad_id, False)
        pol.update(extra)
        batches.update(extra_batches)

    def ref(role):
        """(seq logps, token logps, logits or None) of the reference for a role."""
        mask = pol[role][1]
        if live_ref is not None:
            res = live_ref.logps(batches[role], return_logits=needs_full_logits)
            return res[0].sum(-1), res[0], (res[2] if needs_full_logits else None)
        if ref_cache is not None:
            seq, tok = ref_cache.sequence_and_tokens(ids, role, mask)
            return seq, tok, None
        return None, None, None

    if kind == "pairs":
        return _pair_inputs(pol, ref, chunk, needs_full_logits)
    inp = LossInputs()
    logp, mask = pol["main"][:2]
    inp.token_logps, inp.mask, inp.logps = logp, mask, logp.sum(-1)
    if kind == "sft":
        return inp
    inp.labels = torch.tensor([e["label"] for e in chunk], dtype=torch.bool, device=logp.device)  # unpaired
    inp.ref_logps = ref("main")[0]
    if kl_pairs:
        inp.kl_logps, inp.ref_kl_logps = pol["kl"][0].sum(-1), ref("kl")[0]
    return inp


def _pair_inputs(pol: dict, ref, chunk: list[dict], needs_full_logits: bool) -> LossInputs:
    """LossInputs of a pairs micro-batch: each role's policy values, its reference's, and the pairs'
    rewards when every example carries them."""
    inp = LossInputs()
    for role in ("chosen", "rejected"):
        logp, mask = pol[role][:2]
        setattr(inp, f"{role}_logps", logp.sum(-1))
        setattr(inp, f"{role}_token_logps", logp)
        setattr(inp, f"{role}_mask", mask)
        if needs_full_logits:
            setattr(inp, f"{role}_logits", pol[role][2])
        seq, tok, logits = ref(role)
        if seq is not None:
            setattr(inp, f"ref_{role}_logps", seq)
            setattr(inp, f"ref_{role}_token_logps", tok)
            if logits is not None:
                setattr(inp, f"ref_{role}_logits", logits)
    rewards = [e.get("chosen_reward") for e in chunk], [e.get("rejected_reward") for e in chunk]
    if all(r is not None for r in rewards[0] + rewards[1]):
        dev = inp.chosen_logps.device
        inp.chosen_rewards = torch.tensor(rewards[0], dtype=torch.float32, device=dev)
        inp.rejected_rewards = torch.tensor(rewards[1], dtype=torch.float32, device=dev)
    return inp
