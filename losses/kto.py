r"""KTO: Kahneman-Tversky Optimization on unpaired desirable/undesirable examples (Ethayarajh et al., 2024).

Paper: arXiv:2402.01306, Eqs. 7-8.

.. math::

    r_\theta(x, y) = \log\frac{\pi_\theta(y|x)}{\pi_{ref}(y|x)}, \qquad
    z_0 = \max\Big(0,\ \tfrac{1}{B}\sum_j \log\frac{\pi_\theta(y'_j|x_j)}{\pi_{ref}(y'_j|x_j)}\Big)\ \text{(no gradient)}

    \mathcal{L}_{KTO} = \mathbb{E}_{x,y}\big[\lambda_y - v(x,y)\big], \quad
    v(x,y) = \begin{cases} \lambda_D\,\sigma(\beta(r_\theta(x,y) - z_0)) & y \text{ desirable} \\
                           \lambda_U\,\sigma(\beta(z_0 - r_\theta(x,y))) & y \text{ undesirable} \end{cases}

so each example contributes ``λ_D (1 - σ(β(r - z0)))`` or ``λ_U (1 - σ(β(z0 - r)))``.
The reference point ``z0`` estimates KL(π_θ‖π_ref) from *mismatched* pairs: ``y'_j`` is the
completion of another example of the batch paired with prompt ``x_j`` (the trainer shifts
completions by one, as TRL does), scored by policy (``kl_logps``) and reference
(``ref_kl_logps``). It is clamped at 0 and detached, as in the paper and TRL.

Inputs: ``logps``, ``ref_logps``, ``kl_logps``, ``ref_kl_logps`` (B,) summed over completion
tokens; ``labels`` (B,) bool, True = desirable. Reduction: mean over all B examples.
Metrics: ``kl`` (z0), ``rewards/chosen`` and ``rewards/rejected`` (mean ``β·r`` over desirable /
undesirable examples, present only when the batch has some), their ``rewards/margin``.
Defaults: β = 0.1, ``desirable_weight`` = ``undesirable_weight`` = 1 (the paper's; TRL names).

Parity: equals TRL 1.16 ``KTOTrainer(loss_type="kto")``. TRL averages z0 over data-parallel
ranks before clamping; here z0 is the mean over the batch the loss sees (the same on one process).

Deviations from the reference study (oxRL): its reference point was an exponential moving
average of the *matched* desirable log-ratios (not a mismatched-pair KL estimate, not clamped),
and its loss was ``-logσ(±β(r - z0))`` rather than the paper's ``1 - σ(·)`` value function.
"""

from __future__ import annotations

import torch

from losses._families import unpaired_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput, Tensor

NAME = loss_name(__name__)


def kl_reference_point(kl_logps: Tensor, ref_kl_logps: Tensor) -> Tensor:
    """``z0 = max(0, mean(kl_logps - ref_kl_logps))``, detached."""
    return (kl_logps - ref_kl_logps).mean().detach().clamp(min=0)


def label_reward_metrics(rewards: Tensor, labels: Tensor) -> dict[str, Tensor]:
    """``rewards/chosen`` and ``rewards/rejected`` (the mean reward of the desirable / undesirable
    examples, present only when the batch has some) and their ``rewards/margin``; shared with
    :mod:`losses.bco_unpaired`."""
    metrics = {}
    if labels.any():
        metrics["rewards/chosen"] = rewards[labels].mean()
    if (~labels).any():
        metrics["rewards/rejected"] = rewards[~labels].mean()
    if labels.any() and (~labels).any():
        metrics["rewards/margin"] = metrics["rewards/chosen"] - metrics["rewards/rejected"]
    return metrics


def kto_metrics(rewards: Tensor, labels: Tensor, z0: Tensor) -> dict[str, Tensor]:
    return {"kl": z0, **label_reward_metrics(rewards, labels)}


def kto_loss(
    inputs: LossInputs, *, beta: float = 0.1, desirable_weight: float = 1.0, undesirable_weight: float = 1.0
) -> LossOutput:
    inputs.require(NAME, "logps", "ref_logps", "labels", "kl_logps", "ref_kl_logps")
    labels = inputs.labels.bool()
    z0 = kl_reference_point(inputs.kl_logps, inputs.ref_kl_logps)
    logratio = inputs.logps - inputs.ref_logps
    desirable = desirable_weight * (1 - torch.sigmoid(beta * (logratio - z0)))
    undesirable = undesirable_weight * (1 - torch.sigmoid(beta * (z0 - logratio)))
    losses = torch.where(labels, desirable, undesirable)
    return LossOutput(losses.mean(), kto_metrics(beta * logratio.detach(), labels, z0))


spec = unpaired_spec(
    NAME,
    kto_loss,
    paper="arXiv:2402.01306 Eqs. 7-8",
    version=1,
    description="KTO: prospect-theory value of the reference log-ratio against a mismatched-pair KL reference point.",
)
