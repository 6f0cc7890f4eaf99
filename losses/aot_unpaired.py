r"""AOT, unpaired form: distributional dominance of chosen over rejected rewards (Melnyk et al., 2024).

Paper: arXiv:2406.05882, Sec. 3 (AOT unpaired); TRL ``loss_type="aot_unpaired"``.

.. math::

    c_i = \log\tfrac{\pi_\theta(y_{w,i}|x_i)}{\pi_{ref}(y_{w,i}|x_i)},\qquad
    r_j = \log\tfrac{\pi_\theta(y_{l,j}|x_j)}{\pi_{ref}(y_{l,j}|x_j)}

    \Delta_{(k)} = c_{(k)} - r_{(k)},\qquad
    \mathcal{L} = \frac1B\sum_k -(1-\varepsilon)\log\sigma(\beta\Delta_{(k)}) - \varepsilon\log\sigma(-\beta\Delta_{(k)})

with ``c_(k)``, ``r_(k)`` the k-th smallest chosen and rejected log-ratios in the batch. The chosen
and rejected implicit rewards are treated as two unpaired samples, and the chosen distribution is
made to dominate the rejected one at every quantile; the pairing of the data is not used.
The data pipeline still feeds pairs (the same batch shape as DPO), so the arm is comparable.
With B = 1 it is exactly DPO (cDPO with ε > 0). ``label_smoothing`` ε as in :mod:`losses.aot`.

Inputs: ``chosen_logps``, ``rejected_logps``, ``ref_chosen_logps``, ``ref_rejected_logps`` (B,),
summed over response tokens. Reduction: mean over the B sorted quantiles.
Metrics: per-pair implicit rewards ``β·log(π/π_ref)`` (before sorting).
"""

from __future__ import annotations

from losses._common import checked_logratios, pair_output
from losses._families import pairs_spec
from losses.aot import sorted_logistic
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def aot_unpaired_loss(inputs: LossInputs, *, beta: float = 0.1, label_smoothing: float = 0.0) -> LossOutput:
    chosen, rejected = checked_logratios(inputs, NAME)
    losses = sorted_logistic(chosen, rejected, beta, label_smoothing)
    return pair_output(losses, beta * chosen, beta * rejected)


spec = pairs_spec(
    NAME,
    aot_unpaired_loss,
    paper="arXiv:2406.05882 Sec. 3 (AOT unpaired)",
    version=1,
    description="Unpaired AOT: quantile-matched logistic loss making chosen rewards dominate rejected rewards.",
)
