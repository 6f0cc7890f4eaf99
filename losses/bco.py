r"""BCO: binary classifier optimisation, paired form (Jung et al., 2024).

Paper: arXiv:2404.04656, Sec. 3 (BCE loss with reward shift δ); TRL ``loss_type="bco_pair"``.

.. math::

    r_w = \beta\log\tfrac{\pi_\theta(y_w|x)}{\pi_{ref}(y_w|x)},\quad
    r_l = \beta\log\tfrac{\pi_\theta(y_l|x)}{\pi_{ref}(y_l|x)}

    \mathcal{L}_{BCO} = -\log\sigma(r_w - \delta) - \log\sigma\big(-(r_l - \delta)\big)

The implicit reward is the logit of a binary classifier: chosen responses are class 1, rejected
class 0. The paper shows this BCE loss upper-bounds the DPO loss for any constant δ and picks the
*reward shift* δ = (E[r_w] + E[r_l]) / 2, which tightens the bound, estimated during training as a
running mean of the rewards.

``reward_shift`` (this benchmark's name; neither TRL nor the paper names it):

- ``"batch"`` (default): δ is the mean of the detached rewards ``r_w`` and ``r_l`` of the current
  batch. A loss here is a pure function with no state across steps, so the batch mean stands in
  for the paper's running mean; it is what earlier TRL versions' ``RunningMoments`` gave on their
  first step. δ is detached, so no gradient flows through it.
- ``"none"``: δ = 0. This is exactly TRL 1.16's ``bco_pair``, which dropped the running mean
  (TRL 1.16 has no ``RunningMoments``); the reference study (oxRL) also uses δ = 0.

Inputs: ``chosen_logps``, ``rejected_logps``, ``ref_chosen_logps``, ``ref_rejected_logps`` (B,),
summed over response tokens. Reduction: mean over pairs.
Metrics: implicit rewards ``r_w``, ``r_l`` and ``bco/delta``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from losses._common import pair_logratios, reward_metrics
from losses.registry import LossSpec
from losses.types import LossInputs, LossOutput

REWARD_SHIFTS = ("batch", "none")


def reward_shift_delta(r_w: torch.Tensor, r_l: torch.Tensor, reward_shift: str) -> torch.Tensor:
    """δ: the detached mean of every reward in the batch, or 0."""
    if reward_shift not in REWARD_SHIFTS:
        raise ValueError(
            f"loss 'bco': reward_shift must be one of {', '.join(REWARD_SHIFTS)}, got {reward_shift!r}"
        )
    if reward_shift == "none":
        return torch.zeros((), dtype=r_w.dtype, device=r_w.device)
    return torch.cat([r_w, r_l]).detach().mean()


def bco_loss(inputs: LossInputs, *, beta: float = 0.1, reward_shift: str = "batch") -> LossOutput:
    inputs.require("bco", "chosen_logps", "rejected_logps", "ref_chosen_logps", "ref_rejected_logps")
    chosen, rejected = pair_logratios(inputs)
    r_w, r_l = beta * chosen, beta * rejected
    delta = reward_shift_delta(r_w, r_l, reward_shift)
    losses = -F.logsigmoid(r_w - delta) - F.logsigmoid(-(r_l - delta))
    metrics = reward_metrics(r_w, r_l)
    metrics["bco/delta"] = delta
    return LossOutput(losses.mean(), metrics)


spec = LossSpec(
    name="bco",
    fn=bco_loss,
    paradigm="offline",
    data="pairs",
    needs_reference=True,
    defaults={"beta": 0.1, "reward_shift": "batch"},
    paper="arXiv:2404.04656 Sec. 3 (BCE with reward shift)",
    version=1,
    description="Binary classifier optimisation: BCE on implicit rewards, chosen = 1, rejected = 0, shifted by δ.",
)
