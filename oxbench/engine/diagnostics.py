"""Per-batch off-policy diagnostics, for every online method (issue 15).

With behaviour log-probs μ (the weights that sampled, captured at generation) and the learner's
log-probs π_old at the first pass over a batch (the proximal policy: the weights that consume it), the
importance weights are

* per token, w_t = π_old(y_t) / μ(y_t);
* per sequence, w = Π_t w_t = exp(Σ_t log π_old − log μ).

With ``online.inner_epochs > 1`` the later passes report the same π_old/μ weights, as VCPO
(mit-han-lab/vcpo) computes its ESS, so the ESS-scaled learning rate (``online.ess_lr``) of every pass
measures the behaviour mismatch and not the learner's own drift within the batch. (Before 2026-12-05 the
later passes used π_θ/μ; no committed study ran with ``inner_epochs > 1``.)

The effective sample size ratio ``ess`` = (Σ w)² / (N Σ w²) over the N sequences of the whole batch (1:
on-policy, 1/N: one sequence carries all the weight), and ``ess_token`` the same over response
tokens; VCPO (arXiv 2602.17616) reports that drops in it precede collapse. ``is_max`` and
``is_max_token`` are the largest weights, ``is_truncated`` the share of token weights above the cap,
and ``kl_behaviour`` the k3 estimate of KL(μ ‖ π_old) per token, from samples of μ:
E_μ[(r − 1) − log r] with r = π_old/μ.

The sums of one micro-batch (:func:`weight_sums`) are combined over micro-batches and ranks by
:func:`combine`, so the numbers are the whole batch's however it is split.
"""

from __future__ import annotations

import math

import torch

SUMS = ("n_seq", "sum_w", "sum_w2", "max_w", "n_tok", "sum_wt", "sum_wt2", "max_wt", "over_cap", "k3")


@torch.no_grad()
def weight_sums(logp: torch.Tensor, old: torch.Tensor, mask: torch.Tensor, cap: float) -> dict[str, float]:
    """The sums one micro-batch contributes: ``logp``, ``old`` and ``mask`` are (B, T), zero off the mask."""
    log_ratio = ((logp.detach().double() - old.double()) * mask).clamp(max=700.0)
    seq = log_ratio.sum(-1).exp()
    on = mask > 0
    tok = log_ratio[on].exp()
    k3 = (tok - 1) - log_ratio[on]
    return {
        "n_seq": float(seq.numel()),
        "sum_w": float(seq.sum()),
        "sum_w2": float((seq**2).sum()),
        "max_w": float(seq.max()) if seq.numel() else 0.0,
        "n_tok": float(tok.numel()),
        "sum_wt": float(tok.sum()),
        "sum_wt2": float((tok**2).sum()),
        "max_wt": float(tok.max()) if tok.numel() else 0.0,
        "over_cap": float((tok > cap).sum()),
        "k3": float(k3.sum()),
    }


def combine(parts: list[dict[str, float]]) -> dict[str, float]:
    """The batch's diagnostics from the sums of all its micro-batches (of every rank)."""
    tot = {k: sum(p[k] for p in parts) for k in SUMS if k not in ("max_w", "max_wt")}

    def ess(s, s2, n):
        return s * s / (n * s2) if n and s2 > 0 and math.isfinite(s2) else 0.0

    return {
        "ess": ess(tot["sum_w"], tot["sum_w2"], tot["n_seq"]),
        "ess_token": ess(tot["sum_wt"], tot["sum_wt2"], tot["n_tok"]),
        "is_max": max(p["max_w"] for p in parts),
        "is_max_token": max(p["max_wt"] for p in parts),
        "is_truncated": tot["over_cap"] / max(1.0, tot["n_tok"]),
        "kl_behaviour": tot["k3"] / max(1.0, tot["n_tok"]),
    }


def staleness_histogram(lags: list[int]) -> list[int]:
    """How many rollouts have each lag 0, 1, ..., max (learner version − rollout version)."""
    out = [0] * (max(lags) + 1 if lags else 1)
    for lag in lags:
        out[lag] += 1
    return out


SKETCH = 2**21  # floats (8 MiB in fp32): the most the gradient-cosine diagnostic keeps of a gradient
SKETCH_CHUNK = 2**24  # gradient elements hashed at a time (the transient indices: 128 MiB of int64)
SKETCH_SEED = 0x6F78  # fixed: every step's sketch uses the same hash, so sketches of two steps compare


@torch.no_grad()
def grad_sketch(grads: list[torch.Tensor], size: int | None = None) -> torch.Tensor | None:
    """What the gradient cosine keeps of a gradient (``grads``: its parameters' pieces, in order), at most
    ``size`` floats, never a full copy of a large gradient.

    A gradient of at most ``size`` (default :data:`SKETCH`) elements is kept whole (fp32, flattened): the cosine is exact, as it
    always was (every tiny rung: the committed records' values are reproduced bit for bit). A larger one
    is CountSketched (Charikar et al. 2002): element ``i`` of the flattened gradient is added, with a sign
    ``s(i)``, into bucket ``h(i)`` of ``size``, both hashes drawn once from a fixed seed by position. The
    sketch is linear with E[<Sa, Sb>] = <a, b>, so the cosine of two sketches estimates the cosine of
    the two gradients with an error of order 1/sqrt(size) (about 0.001). Positions are global, so
    sketching one flattened vector gives the same sketch as sketching its pieces."""
    if not grads:
        return None
    size = SKETCH if size is None else size
    if sum(g.numel() for g in grads) <= size:
        return torch.cat([g.detach().flatten().float() for g in grads])
    dev = grads[0].device
    out = torch.zeros(size, dtype=torch.float32, device=dev)
    gen, cached, hashes, offset = torch.Generator(device=dev), -1, None, 0
    for g in grads:
        flat, done = g.detach().reshape(-1), 0
        while done < flat.numel():
            chunk, at = divmod(offset + done, SKETCH_CHUNK)
            if chunk != cached:  # a chunk's hashes depend only on its position: the same every step
                gen.manual_seed(SKETCH_SEED + chunk)
                hashes = torch.randint(2 * size, (SKETCH_CHUNK,), generator=gen, dtype=torch.long, device=dev)
                cached = chunk
            take = min(flat.numel() - done, SKETCH_CHUNK - at)
            h, part = hashes[at : at + take], flat[done : done + take].float()
            out.index_add_(0, h >> 1, torch.where((h & 1) == 1, part, -part))
            done += take
        offset += flat.numel()
    return out


def cosine(a: torch.Tensor | None, b: torch.Tensor | None) -> float | None:
    """cos(a, b) of two flattened gradients, None when either is missing or zero."""
    if a is None or b is None:
        return None
    na, nb = a.norm(), b.norm()
    return float(a @ b / (na * nb)) if na > 0 and nb > 0 else None
