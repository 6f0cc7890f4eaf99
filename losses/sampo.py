r"""SamPO: DPO on down-sampled token-level log-ratios (Lu et al., 2024).

Paper: arXiv:2406.10957 (DPO with "down-sampled KL divergence"); official code LuJunru/SamPO.

DPO's implicit reward sums one log-ratio per token, so the longer response of a pair has
more terms and a larger-magnitude reward. SamPO keeps ``T_m = min(|y_w|, |y_l|)`` token
positions of each response, drawn uniformly without replacement (the shorter response keeps
all of its tokens), and sums the log-ratios over those positions only:

.. math::

    \tilde r(x, y) = \sum_{t \in S(y)} \log\tfrac{\pi_\theta(y_t|x, y_{<t})}{\pi_{ref}(y_t|x, y_{<t})},
    \qquad |S(y_w)| = |S(y_l)| = T_m

    \mathcal{L}_{SamPO} = -\mathbb{E}\big[\log\sigma\big(\beta\,(\tilde r(x, y_w) - \tilde r(x, y_l))\big)\big]

Inputs: token log-probs (B,T) of policy and reference for both responses and their masks.
Reduction: mean over pairs. Equal lengths: exactly DPO.

Sampling is deterministic: the positions are drawn from a generator seeded with the ``seed``
hyper-parameter and the bytes of the batch's reference token log-probs. The loss stays a pure
function (same inputs, same loss), different pairs get different positions, and because the
reference is frozen an example keeps the same positions in every epoch. Across epochs this
differs from the paper's fresh draw; within one epoch it is the paper's distribution.

Deviations, and why:

* The same positions are used for the policy and the reference term, as in the paper's
  equation (a sum of per-token log-ratios). The official code (LuJunru/SamPO) and the
  reference study (oxRL) draw the policy and reference positions independently, which mixes
  log-probs of different tokens into one "ratio".
* The draw is seeded (above) instead of using the global RNG.

Metrics: implicit rewards ``β·r̃`` (detached), accuracy, margin, mean ``T_m``.
"""

from __future__ import annotations

import hashlib

import torch
import torch.nn.functional as F

from losses._common import pair_output
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput, Tensor

NAME = loss_name(__name__)

TOKEN_FIELDS = (
    "chosen_token_logps",
    "rejected_token_logps",
    "ref_chosen_token_logps",
    "ref_rejected_token_logps",
    "chosen_mask",
    "rejected_mask",
)


def seeded_generator(seed: int, *tensors: Tensor) -> torch.Generator:
    """A CPU generator seeded by ``seed`` and the bytes of ``tensors`` (read detached, as float64).

    Same seed and same tensors give the same draws; any change in the tensors changes them.
    """
    digest = hashlib.blake2b(str(int(seed)).encode(), digest_size=8)
    for t in tensors:
        digest.update(t.detach().to("cpu", torch.float64).contiguous().numpy().tobytes())
    return torch.Generator().manual_seed(int.from_bytes(digest.digest(), "little") >> 1)


def keep_random(mask: Tensor, count: Tensor, generator: torch.Generator) -> Tensor:
    """(B,T) mask keeping ``count[b]`` of row b's masked positions, a uniform subset without replacement.

    Every masked position gets an i.i.d. uniform key; the ``count`` largest keys are kept.
    """
    keys = torch.rand(mask.shape, generator=generator, dtype=torch.float64).to(mask.device)
    keys = torch.where(mask > 0, keys, torch.full_like(keys, -1.0))
    ranks = keys.argsort(-1, descending=True).argsort(-1)
    return ((ranks < count.unsqueeze(-1)) & (mask > 0)).to(mask.dtype)


def downsample_masks(
    chosen_mask: Tensor, rejected_mask: Tensor, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """Both masks cut to ``T_m = min(|y_w|, |y_l|)`` positions per pair."""
    t_m = torch.minimum(chosen_mask.sum(-1), rejected_mask.sum(-1))
    return keep_random(chosen_mask, t_m, generator), keep_random(rejected_mask, t_m, generator)


def sampo_loss(inputs: LossInputs, *, beta: float = 0.1, seed: int = 0) -> LossOutput:
    inputs.require(NAME, *TOKEN_FIELDS)
    gen = seeded_generator(seed, inputs.ref_chosen_token_logps, inputs.ref_rejected_token_logps)
    keep_c, keep_r = downsample_masks(inputs.chosen_mask, inputs.rejected_mask, gen)
    chosen = ((inputs.chosen_token_logps - inputs.ref_chosen_token_logps) * keep_c).sum(-1)
    rejected = ((inputs.rejected_token_logps - inputs.ref_rejected_token_logps) * keep_r).sum(-1)
    losses = -F.logsigmoid(beta * (chosen - rejected))
    return pair_output(
        losses, beta * chosen, beta * rejected, {"sampo/kept_tokens": keep_c.sum(-1).float().mean()}
    )


spec = pairs_spec(
    NAME,
    sampo_loss,
    paper="arXiv:2406.10957 (down-sampled DPO)",
    version=1,
    description="DPO on token log-ratios down-sampled to the shorter response's length (no length bias).",
)
