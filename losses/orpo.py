r"""ORPO: Monolithic Preference Optimization without Reference Model (Hong et al., 2024).

Paper: arXiv:2403.07691, Eqs. 4-7.

.. math::

    \bar P_\theta(y|x) = \exp\Big(\tfrac{1}{|y|}\log\pi_\theta(y|x)\Big), \qquad
    \mathrm{odds}_\theta(y|x) = \frac{\bar P_\theta(y|x)}{1 - \bar P_\theta(y|x)}

    \mathcal{L}_{OR} = -\log\sigma\Big(\log\frac{\mathrm{odds}_\theta(y_w|x)}{\mathrm{odds}_\theta(y_l|x)}\Big),
    \qquad \mathcal{L}_{ORPO} = \mathbb{E}\big[\mathcal{L}_{SFT} + \lambda\,\mathcal{L}_{OR}\big]

``log odds = mean-logp - log(1 - exp(mean-logp))``, computed with a stable ``log1mexp``.
``L_SFT`` is the ordinary causal-LM NLL of the chosen response: a token-level mean over every
chosen response token of the batch (as :mod:`losses.sft`).

Inputs: ``chosen_logps``, ``rejected_logps`` (B,) summed; ``chosen_token_logps`` (B, T) and the
two masks. Reduction: token mean for ``L_SFT``, mean over pairs for ``L_OR``.
Metrics: rewards ``λ·mean-logp`` (TRL's), accuracy, margin, ``nll``, ``log_odds_ratio`` (mean
``logσ(log-odds ratio)``) and ``log_odds_chosen`` (mean log-odds ratio), as TRL logs them.
Default λ = 0.1 (the paper's; TRL calls it ``beta``).

Deviations from TRL 1.16, deliberate:
- TRL's ORPO NLL runs over the *full* chosen sequence, prompt tokens included (its comment: "orpo
  chosen nll loss is computed over the full prompt and response"). The paper's ``L_SFT`` is the
  likelihood of the response given the prompt, and the other arms never train on prompt tokens,
  so ours covers response tokens only. With a one-token prompt the two coincide (tested).
- ``mean-logp`` is clamped to ≤ -1e-6 before ``log1mexp``: a response whose every token has
  probability 1 in the training dtype (bf16 rounds confident log-probs to 0) would give
  ``log(1 - 1) = -inf``. TRL does not clamp; the values agree everywhere else.

Deviation from the reference study (oxRL): its odds used the *summed* log-probs, not the
per-token mean the paper defines; sequence probabilities are tiny, odds ≈ p, so its odds ratio
reduced to the plain summed log-prob margin (a CPO-like term with β = 1).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from losses._common import reward_metrics
from losses._families import ref_free_pairs_spec
from losses.registry import loss_name
from losses.sft import token_mean_nll
from losses.simpo import mean_logps
from losses.types import LossInputs, LossOutput, Tensor

NAME = loss_name(__name__)

_MAX_MEAN_LOGP = -1e-6


def log1mexp(x: Tensor) -> Tensor:
    """``log(1 - exp(x))`` for ``x < 0``, switching form at ``-log 2`` to avoid cancellation."""
    return torch.where(x < -math.log(2), torch.log1p(-torch.exp(x)), torch.log(-torch.expm1(x)))


def log_odds(mean_logp: Tensor) -> Tensor:
    """``log(p / (1 - p))`` of the per-token mean probability ``p = exp(mean_logp)``."""
    mean_logp = mean_logp.clamp(max=_MAX_MEAN_LOGP)
    return mean_logp - log1mexp(mean_logp)


def orpo_loss(inputs: LossInputs, *, beta: float = 0.1) -> LossOutput:
    inputs.require(
        NAME, "chosen_logps", "rejected_logps", "chosen_token_logps", "chosen_mask", "rejected_mask"
    )
    chosen, rejected = mean_logps(inputs)
    ratio = log_odds(chosen) - log_odds(rejected)
    log_sig = F.logsigmoid(ratio)
    nll = token_mean_nll(inputs.chosen_token_logps, inputs.chosen_mask)
    metrics = reward_metrics(beta * chosen, beta * rejected)
    metrics.update({"nll": nll.detach(), "log_odds_ratio": log_sig.mean(), "log_odds_chosen": ratio.mean()})
    return LossOutput(nll - beta * log_sig.mean(), metrics)


spec = ref_free_pairs_spec(
    NAME,
    orpo_loss,
    paper="arXiv:2403.07691 Eqs. 4-7",
    version=1,
    description="ORPO: token-mean NLL on the chosen plus a log-odds-ratio penalty on length-normalised probabilities.",
)
