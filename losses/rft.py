r"""RFT: rejection-sampling fine-tuning on the policy's own correct answers.

Paper: Yuan et al., 2023, "Scaling Relationship on Learning Mathematical Reasoning with Large
Language Models", arXiv:2308.01825 (RFT); the same idea as STaR (arXiv:2203.14465) and
ReST/expert iteration.

The maths is SFT's (see :mod:`losses.sft`):

.. math::

    \mathcal{L}_{RFT} = -\frac{1}{\sum_{i,t} m_{i,t}} \sum_{i,t} m_{i,t}\,\log\pi_\theta(y_{i,t}\mid x_i, y_{i,<t})

but the answers ``y`` are the *self-play chosen* answers (the best-graded sample of the policy
for each prompt, ``sft_source="self_play"``) rather than the gold answers. Sampling, grading and
filtering happen in the data pipeline; this function only sees the kept answers.

Inputs: ``token_logps`` (B, T) and ``mask`` (B, T). Reduction: token-level mean over the batch.
Metrics: ``nll`` and ``tokens``.

Naming: the reference study (oxRL) calls this arm "SFT" in its results tables (its SFT arm trains
on the self-play chosen answers); here it is ``rft`` and ``sft`` means gold answers, so the two
data sources are two arms that can be compared. Its loss reduction differs as for ``sft``
(oxRL sums the token NLL; we take the token mean).
"""

from __future__ import annotations

from losses._families import sft_spec
from losses.registry import loss_name
from losses.sft import nll_output
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def rft_loss(inputs: LossInputs) -> LossOutput:
    inputs.require(NAME, "token_logps", "mask")
    return nll_output(inputs)


spec = sft_spec(
    NAME,
    rft_loss,
    paper="arXiv:2308.01825 (rejection-sampling fine-tuning)",
    version=1,
    sft_source="self_play",
    description="Rejection-sampling fine-tuning: SFT on the policy's own best-graded (self-play chosen) answers.",
)
