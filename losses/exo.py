r"""EXO: efficient exact optimisation of the alignment objective, pairwise form (Ji et al., 2024).

Paper: arXiv:2402.00856, Eq. 16 (EXO-pref) with K = 2 responses; TRL ``loss_type="exo_pair"``.

.. math::

    q_w = \sigma(\beta h),\quad q_l = \sigma(-\beta h),\qquad p_w = 1-\varepsilon,\quad p_l = \varepsilon

    \mathcal{L}_{EXO} = \mathrm{KL}(q \,\|\, p) = q_w(\log q_w - \log p_w) + q_l(\log q_l - \log p_l)

``q`` is the policy's softmax over {chosen, rejected} of the scaled log-ratios ``β·log(π/π_ref)``,
``p`` the label distribution smoothed by ε (``label_smoothing``, TRL's name). Where DPO minimises
the forward KL(p‖q), EXO minimises the reverse KL, which is mode-seeking; the minimum is at
``βh* = log((1-ε)/ε)``. ε must be > 0 (``log ε`` appears); the paper recommends ε = 1e-3.

Inputs: ``chosen_logps``, ``rejected_logps``, ``ref_chosen_logps``, ``ref_rejected_logps`` (B,),
summed over response tokens. Reduction: mean over pairs. Metrics: implicit rewards ``β·log(π/π_ref)``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from losses._common import checked_logratios, pair_output
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def exo_loss(inputs: LossInputs, *, beta: float = 0.1, label_smoothing: float = 0.001) -> LossOutput:
    chosen, rejected = checked_logratios(inputs, NAME)
    eps = label_smoothing
    if not 0.0 < eps < 0.5:
        raise ValueError(f"loss {NAME!r}: label_smoothing must lie in (0, 0.5), got {eps}")
    z = beta * (chosen - rejected)
    log_qw, log_ql = F.logsigmoid(z), F.logsigmoid(-z)
    losses = torch.exp(log_qw) * (log_qw - math.log1p(-eps)) + torch.exp(log_ql) * (log_ql - math.log(eps))
    return pair_output(losses, beta * chosen, beta * rejected)


spec = pairs_spec(
    NAME,
    exo_loss,
    paper="arXiv:2402.00856 Eq. 16 (EXO-pref, K=2)",
    version=1,
    description="EXO: reverse-KL between the policy's pairwise preference distribution and ε-smoothed labels.",
)
