r"""SimPO: Simple Preference Optimization with a reference-free reward (Meng et al., 2024).

Paper: arXiv:2405.14734, Eq. 6.

.. math::

    \mathcal{L}_{SimPO} = -\mathbb{E}\Big[\log\sigma\Big(\tfrac{\beta}{|y_w|}\log\pi_\theta(y_w|x)
                          - \tfrac{\beta}{|y_l|}\log\pi_\theta(y_l|x) - \gamma\Big)\Big]

The reward is the length-normalised (per-token average) log-probability scaled by β; γ is a
target margin. With ``label_smoothing`` ε > 0 the loss is ``-(1-ε) logσ(z) - ε logσ(-z)``
(TRL's CPOTrainer ``loss_type="simpo"``; ε = 0 is the paper).

Inputs: ``chosen_logps``, ``rejected_logps`` (B,) summed over response tokens, and
``chosen_mask``, ``rejected_mask`` (B, T) for the lengths. Reduction: mean over pairs.
Metrics: rewards ``β·mean-logp`` (detached), accuracy, margin.

Hyper-parameters (TRL names): ``beta`` = β, ``simpo_gamma`` = γ itself (not γ/β: TRL subtracts
``simpo_gamma / beta`` from the log-prob margin and then multiplies by β). Defaults β = 2.0,
γ = 1.0 (γ/β = 0.5): the paper's Llama-3-Base setting; the paper tunes β ∈ [2, 2.5] (10 for
some instruct models) and γ/β ∈ [0.1, 0.8].

Parity: equals TRL 1.16 ``CPOTrainer(loss_type="simpo", cpo_alpha=0)``. TRL's default
``cpo_alpha=1.0`` adds CPO's NLL term ("CPO-SimPO"); SimPO itself has none.

Deviations from the reference study (oxRL): it ran SimPO at β = 0.1 (the authors use 2.0-2.5),
and its average log-prob was taken over the whole padded input ids (its mask ``labels != -100``
is always true there), prompt and padding tokens included. We use the paper's defaults and
average over response tokens only.
"""

from __future__ import annotations

import torch.nn.functional as F

from losses._common import lengths, pair_output
from losses._families import ref_free_pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput, Tensor

NAME = loss_name(__name__)


def mean_logps(inputs: LossInputs) -> tuple[Tensor, Tensor]:
    """Per-token average log-probs of chosen and rejected, each (B,)."""
    return (
        inputs.chosen_logps / lengths(inputs.chosen_mask),
        inputs.rejected_logps / lengths(inputs.rejected_mask),
    )


def sigmoid_margin_loss(z: Tensor, label_smoothing: float) -> Tensor:
    """Per-pair ``-(1-ε) logσ(z) - ε logσ(-z)``."""
    return -(1 - label_smoothing) * F.logsigmoid(z) - label_smoothing * F.logsigmoid(-z)


def simpo_loss(
    inputs: LossInputs, *, beta: float = 2.0, simpo_gamma: float = 1.0, label_smoothing: float = 0.0
) -> LossOutput:
    inputs.require(NAME, "chosen_logps", "rejected_logps", "chosen_mask", "rejected_mask")
    chosen, rejected = mean_logps(inputs)
    losses = sigmoid_margin_loss(beta * (chosen - rejected) - simpo_gamma, label_smoothing)
    return pair_output(losses, beta * chosen, beta * rejected)


spec = ref_free_pairs_spec(
    NAME,
    simpo_loss,
    paper="arXiv:2405.14734 Eq. 6",
    version=1,
    description="SimPO: logistic loss on the length-normalised log-prob margin minus a target margin, no reference.",
)
