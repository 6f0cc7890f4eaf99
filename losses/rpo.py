r"""RPO: iterative reasoning preference optimisation's loss, DPO + NLL (Pang et al., 2024).

Paper: arXiv:2404.19733 (the DPO + NLL training loss); TRL ``loss_type=["sigmoid", "sft"]`` with
``loss_weights=[1, rpo_alpha]`` (TRL < 1.0 had ``rpo_alpha``).

.. math::

    \mathcal{L}_{RPO} = \mathcal{L}_{DPO}
        + \alpha\,\mathbb{E}\Big[-\frac{\log\pi_\theta(y_w|x)}{|y_w|}\Big]

The NLL of the chosen response (chain of thought + answer in the paper) is normalised by its
own length, then averaged over pairs. Default ``rpo_alpha = 1`` (the paper's).

Inputs: the four summed log-probs (B,) and ``chosen_mask`` (B,T) for the lengths.
Reduction: mean over pairs of both terms.

Deviation from TRL, and why: TRL's ``sft`` term is the mean over all chosen tokens of the
batch, ``Σ_i Σ_t -log π / Σ_i |y_i|``, so longer responses weigh more; the paper divides each
response by its own length first. The two agree when all chosen responses have the same
length (the TRL parity test uses that case); we follow the paper.

Metrics: implicit rewards (detached), accuracy, margin, the NLL term.
"""

from __future__ import annotations

from losses._common import PAIR_FIELDS, lengths
from losses._families import pairs_spec
from losses.dpo import dpo_loss
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def rpo_loss(inputs: LossInputs, *, beta: float = 0.1, rpo_alpha: float = 1.0) -> LossOutput:
    inputs.require(NAME, *PAIR_FIELDS, "chosen_mask")
    dpo = dpo_loss(inputs, beta=beta)
    nll = (-inputs.chosen_logps / lengths(inputs.chosen_mask)).mean()
    metrics = {**dpo.metrics, "rpo/nll": float(nll.detach())}
    return LossOutput(dpo.loss + rpo_alpha * nll, metrics)


spec = pairs_spec(
    NAME,
    rpo_loss,
    paper="arXiv:2404.19733 (DPO + length-normalised NLL)",
    version=1,
    description="RPO: DPO plus rpo_alpha times the length-normalised NLL of the chosen response.",
)
