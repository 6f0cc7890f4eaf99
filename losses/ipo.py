r"""IPO: Identity Preference Optimisation (Azar et al., 2023).

Paper: arXiv:2310.12036, Eq. 17 (the empirical IPO loss; τ is called ``beta`` here, as in TRL).

.. math::

    \mathcal{L}_{IPO} = \mathbb{E}\Big[\Big(\bar h - \frac{1}{2\beta}\Big)^2\Big],\qquad
    \bar h = \frac{\log\pi_\theta(y_w|x) - \log\pi_{ref}(y_w|x)}{|y_w|}
           - \frac{\log\pi_\theta(y_l|x) - \log\pi_{ref}(y_l|x)}{|y_l|}

IPO regresses the log-ratio margin onto the fixed target ``1/(2β)`` instead of pushing it to
infinity as DPO's logistic loss does, so it does not over-fit deterministic preferences.

Length normalisation: the log-ratios are **averaged per response token** (``|y|`` = number of
response tokens, from ``chosen_mask`` / ``rejected_mask``), exactly as TRL's ``loss_type="ipo"``
does; TRL confirmed with the IPO authors that the paper's results use this form. With summed
log-ratios the squared loss grows with the square of the response length and the target
``1/(2β)`` means a different thing for every length.
Deviation from the reference study (oxRL): oxRL regressed the *summed* log-ratio margin onto
``1/(2β)``; we do not copy that.

Inputs: ``chosen_logps``, ``rejected_logps``, ``ref_chosen_logps``, ``ref_rejected_logps`` (B,),
``chosen_mask``, ``rejected_mask`` (B, T). Reduction: mean over pairs.
Metrics: the standard implicit rewards ``β·log(π/π_ref)`` (summed, as TRL logs them) and
``ipo/normalized_margin``, the mean of :math:`\bar h`.
"""

from __future__ import annotations

from losses._common import normalized_margin, normalized_margin_output
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def ipo_loss(inputs: LossInputs, *, beta: float = 0.1) -> LossOutput:
    margin = normalized_margin(inputs, NAME)
    losses = (margin - 1.0 / (2.0 * beta)) ** 2
    return normalized_margin_output(losses, margin, inputs, beta, NAME)


spec = pairs_spec(
    NAME,
    ipo_loss,
    paper="arXiv:2310.12036 Eq. 17",
    version=1,
    description="Identity Preference Optimisation: squared regression of the per-token log-ratio margin onto 1/(2β).",
)
