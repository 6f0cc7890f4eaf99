r"""Hinge loss on reference-normalised log-likelihoods (SLiC / RSO "hinge-norm").

Papers: SLiC-HF, arXiv:2305.10425 (calibration hinge loss); the reference-normalised form with
margin ``1/β`` is the "hinge-norm" loss of RSO, arXiv:2309.06657 Sec. 3. TRL ``loss_type="hinge"``.

.. math::

    \mathcal{L}_{hinge} = \mathbb{E}\big[\max(0,\; 1 - \beta h)\big],\qquad
    h = \log\tfrac{\pi_\theta(y_w|x)}{\pi_{ref}(y_w|x)} - \log\tfrac{\pi_\theta(y_l|x)}{\pi_{ref}(y_l|x)}

A max-margin (SVM) loss: zero, with zero gradient, once the log-ratio margin exceeds ``1/β``.
SLiC-HF itself uses raw policy log-likelihoods; like TRL we normalise by the reference so that
all arms of this family share DPO's implicit reward.

Inputs: ``chosen_logps``, ``rejected_logps``, ``ref_chosen_logps``, ``ref_rejected_logps`` (B,),
summed over response tokens. Reduction: mean over pairs. Metrics: implicit rewards ``β·log(π/π_ref)``.
"""

from __future__ import annotations

import torch

from losses._common import checked_logratios, pair_output
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def hinge_loss(inputs: LossInputs, *, beta: float = 0.1) -> LossOutput:
    chosen, rejected = checked_logratios(inputs, NAME)
    losses = torch.relu(1.0 - beta * (chosen - rejected))
    return pair_output(losses, beta * chosen, beta * rejected)


spec = pairs_spec(
    NAME,
    hinge_loss,
    paper="arXiv:2309.06657 Sec. 3 (hinge-norm); arXiv:2305.10425",
    version=1,
    description="SLiC-style hinge loss max(0, 1 - β·margin) on reference-normalised log-ratios.",
)
