r"""cDPO: conservative DPO for noisy preference labels (Mitchell, 2023).

Paper: E. Mitchell, "A note on DPO with noisy preferences & relationship to IPO" (2023),
https://ericmitchell.ai/cdpo.pdf, Eq. 3 (no arXiv id). Older TRL versions computed it as
``loss_type="sigmoid"`` with ``label_smoothing`` = ε; TRL 1.16's ``sigmoid`` ignores
``label_smoothing``, and the same smoothed logistic survives only inside its ``aot`` losses (which
equal cDPO for a batch of one pair; the parity test uses that).

.. math::

    \mathcal{L}_{cDPO} = -(1-\varepsilon)\log\sigma(\beta h) - \varepsilon\log\sigma(-\beta h),\qquad
    h = \log\tfrac{\pi_\theta(y_w|x)}{\pi_{ref}(y_w|x)} - \log\tfrac{\pi_\theta(y_l|x)}{\pi_{ref}(y_l|x)}

Each label is assumed flipped with probability ε, so the target of the logistic loss is
``1-ε`` instead of 1 and the optimum margin is finite: ``βh* = log((1-ε)/ε)``.
The maths is :func:`losses.dpo.dpo_loss`; this module only gives cDPO its own name and a
non-zero default ε. ε = 0 is plain DPO.

Default ε = 0.1: the note fixes no value; 0.1 is the flip rate TRL documents as typical for the
closely related Robust DPO, and the reference study's cDPO default.

Inputs: ``chosen_logps``, ``rejected_logps``, ``ref_chosen_logps``, ``ref_rejected_logps`` (B,),
summed over response tokens. Reduction: mean over pairs. Metrics: implicit rewards ``β·log(π/π_ref)``.
"""

from __future__ import annotations

from losses._common import PAIR_FIELDS
from losses._families import pairs_spec
from losses.dpo import dpo_loss
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def cdpo_loss(inputs: LossInputs, *, beta: float = 0.1, label_smoothing: float = 0.1) -> LossOutput:
    inputs.require(NAME, *PAIR_FIELDS)
    if not 0.0 <= label_smoothing <= 0.5:
        raise ValueError(f"loss {NAME!r}: label_smoothing must lie in [0, 0.5], got {label_smoothing}")
    return dpo_loss(inputs, beta=beta, label_smoothing=label_smoothing)


spec = pairs_spec(
    NAME,
    cdpo_loss,
    paper="ericmitchell.ai/cdpo.pdf Eq. 3 (Mitchell 2023, no arXiv id)",
    version=1,
    description="Conservative DPO: DPO with label smoothing ε, assuming each preference is flipped with probability ε.",
)
