"""Small tensor helpers shared by the loss modules. Pure functions, no state."""

from __future__ import annotations

import torch

from losses.types import LossOutput

Tensor = torch.Tensor

#: the summed log-probs of a pair scored against a reference, each (B,): what every DPO-style loss reads
PAIR_FIELDS = ("chosen_logps", "rejected_logps", "ref_chosen_logps", "ref_rejected_logps")


def masked_sum(x: Tensor, mask: Tensor, dim: int = -1) -> Tensor:
    return (x * mask).sum(dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = -1) -> Tensor:
    """Mean over ``mask`` along ``dim`` (``dim=None``: over every masked element)."""
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1.0)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1.0)


def lengths(mask: Tensor) -> Tensor:
    """(B, T) mask -> (B,) number of response tokens, at least 1."""
    return mask.sum(-1).clamp(min=1.0)


def pair_logratios(inputs, *, length_normalize: bool = False) -> tuple[Tensor, Tensor]:
    """Policy-minus-reference log-ratios of chosen and rejected, each (B,).

    With ``length_normalize`` the ratios are averaged per token instead of summed.
    """
    pc, pr = inputs.chosen_logps, inputs.rejected_logps
    rc, rr = inputs.ref_chosen_logps, inputs.ref_rejected_logps
    if length_normalize:
        lc, lr = lengths(inputs.chosen_mask), lengths(inputs.rejected_mask)
        return (pc - rc) / lc, (pr - rr) / lr
    return pc - rc, pr - rr


def checked_logratios(inputs, name: str, *more: str, length_normalize: bool = False) -> tuple[Tensor, Tensor]:
    """:func:`pair_logratios`, after checking that ``inputs`` holds :data:`PAIR_FIELDS` and ``more``
    (loss ``name``'s error names what is missing)."""
    inputs.require(name, *PAIR_FIELDS, *more)
    return pair_logratios(inputs, length_normalize=length_normalize)


def group_stats(values: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-element group mean, group std (unbiased, like ``torch.std``) and group size."""
    uniq, inv = torch.unique(group_ids, return_inverse=True)
    g = uniq.numel()
    count = torch.zeros(g, dtype=values.dtype, device=values.device).index_add_(
        0, inv, torch.ones_like(values)
    )
    total = torch.zeros(g, dtype=values.dtype, device=values.device).index_add_(0, inv, values)
    mean = total / count
    sq = torch.zeros(g, dtype=values.dtype, device=values.device).index_add_(
        0, inv, (values - mean[inv]) ** 2
    )
    std = torch.sqrt(sq / (count - 1).clamp(min=1.0))
    return mean[inv], std[inv], count[inv]


def reward_metrics(chosen: Tensor, rejected: Tensor) -> dict[str, Tensor]:
    """The standard implicit-reward metrics of pairwise methods (detached)."""
    chosen, rejected = chosen.detach(), rejected.detach()
    return {
        "rewards/chosen": chosen.mean(),
        "rewards/rejected": rejected.mean(),
        "rewards/accuracy": (chosen > rejected).float().mean(),
        "rewards/margin": (chosen - rejected).mean(),
    }


def pair_output(
    losses: Tensor, chosen: Tensor, rejected: Tensor, extra: dict | None = None, *, state: dict | None = None
) -> LossOutput:
    """A pairwise loss's output: the mean of its (B,) per-pair ``losses``, the implicit-reward metrics of
    ``chosen`` and ``rejected`` (:func:`reward_metrics`, usually ``β·`` the log-ratios), then the loss's
    ``extra`` metrics; ``state``: as :class:`LossOutput`'s."""
    return LossOutput(losses.mean(), {**reward_metrics(chosen, rejected), **(extra or {})}, state=state)


def normalized_margin(inputs, name: str) -> Tensor:
    """(B,) ``h̄``, the chosen-minus-rejected log-ratio margin averaged per response token (IPO, LN-DPO),
    after checking the pair's fields and both masks."""
    chosen, rejected = checked_logratios(inputs, name, "chosen_mask", "rejected_mask", length_normalize=True)
    return chosen - rejected


def normalized_margin_output(losses: Tensor, margin: Tensor, inputs, beta: float, name: str) -> LossOutput:
    """:func:`pair_output` of a loss on :func:`normalized_margin`: the implicit rewards ``β·`` the *summed*
    log-ratios (as TRL logs them), then ``<name>/normalized_margin``, the mean of ``margin``."""
    chosen, rejected = pair_logratios(inputs)
    extra = {f"{name}/normalized_margin": margin.detach().mean()}
    return pair_output(losses, beta * chosen, beta * rejected, extra)
