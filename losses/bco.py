r"""BCO: binary classifier optimisation, paired form (Jung et al., 2024).

Paper: arXiv:2404.04656, Sec. 3 (BCE loss with reward shift δ); TRL ``loss_type="bco_pair"``.

.. math::

    r_w = \beta\log\tfrac{\pi_\theta(y_w|x)}{\pi_{ref}(y_w|x)},\quad
    r_l = \beta\log\tfrac{\pi_\theta(y_l|x)}{\pi_{ref}(y_l|x)}

    \mathcal{L}_{BCO} = -\log\sigma(r_w - \delta) - \log\sigma\big(-(r_l - \delta)\big)

The implicit reward is the logit of a binary classifier: chosen responses are class 1, rejected
class 0. The paper shows this BCE loss upper-bounds the DPO loss for any constant δ and picks the
*reward shift* δ = (E[r_w] + E[r_l]) / 2, which tightens the bound, estimated during training as a
running mean of the rewards. The unpaired form, on labelled completions (TRL's ``BCOTrainer``), is
:mod:`losses.bco_unpaired`, which shares this module's reward shift and state.

``reward_shift`` (this benchmark's name; neither TRL nor the paper names it):

- ``"running"`` (default, version 2): δ is the running mean of every detached reward ``r_w`` and
  ``r_l`` seen so far, this batch included, as earlier TRL versions' ``RunningMoments`` kept it (a
  cumulative mean, every reward weighted equally). It is the loss's state (``initial_state``):
  ``reward_mean`` and ``count``, carried by the trainer across optimiser steps. Each micro-batch
  updates it with its own rewards; the trainer averages the proposals of the micro-batches and
  ranks of a step, which for equal micro-batches is the running mean over every reward of the step
  with ``count`` growing by one micro-batch per step (the weights of the steps stay equal).
- ``"batch"``: δ is the mean of the current batch's detached rewards (version 1's default, the
  running mean's first step).
- ``"none"``: δ = 0. This is exactly TRL 1.16's ``bco_pair``, which dropped the running mean
  (TRL 1.16 has no ``RunningMoments``); the reference study (oxRL) also uses δ = 0.

Inputs: ``chosen_logps``, ``rejected_logps``, ``ref_chosen_logps``, ``ref_rejected_logps`` (B,),
summed over response tokens. Reduction: mean over pairs.
Metrics: implicit rewards ``r_w``, ``r_l`` and ``bco/delta``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from losses._common import checked_logratios, pair_output
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)

REWARD_SHIFTS = ("running", "batch", "none")
INITIAL_STATE = {"reward_mean": 0.0, "count": 0.0}


def running_mean(state: dict | None, rewards: torch.Tensor) -> dict[str, torch.Tensor]:
    """The cumulative mean after ``rewards``: ``m ← m + (mean(r) − m)·n/(count + n)``."""
    state = state or {k: torch.tensor(v) for k, v in INITIAL_STATE.items()}
    rewards = rewards.detach().double().cpu()
    n, count = float(rewards.numel()), state["count"].double()
    mean = state["reward_mean"].double()
    return {"reward_mean": mean + (rewards.mean() - mean) * n / (count + n), "count": count + n}


def reward_shift_delta(
    rewards: torch.Tensor, reward_shift: str, state: dict | None = None, *, name: str = NAME
) -> tuple[torch.Tensor, dict | None]:
    """δ (detached) of a batch's implicit ``rewards`` (every reward of the batch, any order) and, for
    ``"running"``, the updated state; loss ``name``'s error names an unknown ``reward_shift``. Shared with
    :mod:`losses.bco_unpaired`."""
    if reward_shift not in REWARD_SHIFTS:
        raise ValueError(
            f"loss {name!r}: reward_shift must be one of {', '.join(REWARD_SHIFTS)}, got {reward_shift!r}"
        )
    if reward_shift == "none":
        return torch.zeros((), dtype=rewards.dtype, device=rewards.device), None
    rewards = rewards.detach()
    if reward_shift == "batch":
        return rewards.mean(), None
    new = running_mean(state, rewards)
    return new["reward_mean"].to(rewards.dtype).to(rewards.device), {k: v.float() for k, v in new.items()}


def bco_loss(inputs: LossInputs, *, beta: float = 0.1, reward_shift: str = "running") -> LossOutput:
    chosen, rejected = checked_logratios(inputs, NAME)
    r_w, r_l = beta * chosen, beta * rejected
    delta, state = reward_shift_delta(torch.cat([r_w, r_l]), reward_shift, inputs.state)
    losses = -F.logsigmoid(r_w - delta) - F.logsigmoid(-(r_l - delta))
    return pair_output(losses, r_w, r_l, {"bco/delta": delta}, state=state)


spec = pairs_spec(
    NAME,
    bco_loss,
    initial_state=INITIAL_STATE,
    paper="arXiv:2404.04656 Sec. 3 (BCE with reward shift, running mean)",
    version=2,
    description="Binary classifier optimisation: BCE on implicit rewards, chosen = 1, rejected = 0, shifted by δ.",
)
