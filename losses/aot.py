r"""AOT: alignment via optimal transport, paired form (Melnyk et al., 2024).

Paper: arXiv:2406.05882, Sec. 3 (AOT paired; the 1-D optimal-transport coupling is the sorted
one); TRL ``loss_type="aot"``.

.. math::

    u_i = \log\pi_\theta(y_{w,i}|x_i) - \log\pi_\theta(y_{l,i}|x_i),\qquad
    v_i = \log\pi_{ref}(y_{w,i}|x_i) - \log\pi_{ref}(y_{l,i}|x_i)

    \Delta_{(k)} = u_{(k)} - v_{(k)},\qquad
    \mathcal{L}_{AOT} = \frac1B\sum_k -(1-\varepsilon)\log\sigma(\beta\Delta_{(k)}) - \varepsilon\log\sigma(-\beta\Delta_{(k)})

where ``u_(k)``, ``v_(k)`` are the k-th smallest values of ``u`` and ``v`` in the batch. Instead of
the per-pair margin, AOT asks the *distribution* of policy chosen-vs-rejected log-ratios to
dominate the reference's distribution (first-order stochastic dominance), quantile by quantile;
sorting both sides is the optimal 1-D transport plan. ``label_smoothing`` ε gives the smoothed
logistic loss as in TRL (ε = 0: plain logistic).

The loss is a batch statistic: it depends on which pairs share the (micro-)batch, and with B = 1 it
is exactly DPO (cDPO with ε > 0).
Deviation from the reference study (oxRL): oxRL's ``aot`` sorted the chosen and rejected
log-ratios against each other, which is the *unpaired* variant (here :mod:`losses.aot_unpaired`).

Inputs: ``chosen_logps``, ``rejected_logps``, ``ref_chosen_logps``, ``ref_rejected_logps`` (B,),
summed over response tokens. Reduction: mean over the B sorted quantiles.
Metrics: per-pair implicit rewards ``β·log(π/π_ref)`` (before sorting).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from losses._common import checked_logratios, pair_output
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)

Tensor = torch.Tensor


def sorted_logistic(upper: Tensor, lower: Tensor, beta: float, label_smoothing: float) -> Tensor:
    """Smoothed logistic loss on ``sort(upper) - sort(lower)``, one value per quantile."""
    delta = torch.sort(upper, dim=0).values - torch.sort(lower, dim=0).values
    return -(1 - label_smoothing) * F.logsigmoid(beta * delta) - label_smoothing * F.logsigmoid(-beta * delta)


def aot_loss(inputs: LossInputs, *, beta: float = 0.1, label_smoothing: float = 0.0) -> LossOutput:
    chosen, rejected = checked_logratios(inputs, NAME)
    policy_margin = inputs.chosen_logps - inputs.rejected_logps
    ref_margin = inputs.ref_chosen_logps - inputs.ref_rejected_logps
    losses = sorted_logistic(policy_margin, ref_margin, beta, label_smoothing)
    return pair_output(losses, beta * chosen, beta * rejected)


spec = pairs_spec(
    NAME,
    aot_loss,
    paper="arXiv:2406.05882 Sec. 3 (AOT paired)",
    version=1,
    description="Alignment via optimal transport: quantile-matched logistic loss, policy vs reference log-ratio margins.",
)
