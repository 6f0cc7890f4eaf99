r"""RFT: rejection-sampling fine-tuning on the policy's own correct answers.

Paper: Yuan et al., 2023, "Scaling Relationship on Learning Mathematical Reasoning with Large
Language Models", arXiv:2308.01825 (RFT); the same idea as STaR (arXiv:2203.14465) and
ReST/expert iteration.

The maths is SFT's, and so is the function (:func:`losses.sft.sft_loss`; this module only registers it
with another data source):

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

import dataclasses

from losses import sft
from losses.registry import loss_name

NAME = loss_name(__name__)

# SFT's loss function itself (one maths, one function), registered with the self-play data source.
spec = dataclasses.replace(
    sft.spec,
    name=NAME,
    paper="arXiv:2308.01825 (rejection-sampling fine-tuning)",
    version=1,
    sft_source="self_play",
    description="Rejection-sampling fine-tuning: SFT on the policy's own best-graded (self-play chosen) answers.",
)
