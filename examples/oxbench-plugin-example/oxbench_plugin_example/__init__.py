r"""An example oxbench loss plugin: DPO with a target margin γ.

.. math::

    \mathcal{L} = -\mathbb{E}\Big[\log\sigma\big(\beta\,h - \gamma\big)\Big],\qquad
    h = \log\tfrac{\pi_\theta(y_w|x)}{\pi_{ref}(y_w|x)} - \log\tfrac{\pi_\theta(y_l|x)}{\pi_{ref}(y_l|x)}

γ = 0 is DPO (arXiv:2305.18290 Eq. 7); γ > 0 asks the implicit-reward margin β·h to exceed γ
before the loss saturates, the reference-based counterpart of SimPO's target margin
(arXiv:2405.14734 Eq. 6).

Inputs: ``chosen_logps``, ``rejected_logps``, ``ref_chosen_logps``, ``ref_rejected_logps``,
each (B,), summed over response tokens. Reduction: mean over pairs.
Metrics: implicit rewards ``β·log(π/π_ref)`` (detached), their accuracy and margin.

Published through the entry point declared in this package's ``pyproject.toml``::

    [project.entry-points."oxbench.losses"]
    example_sigmoid_margin = "oxbench_plugin_example:spec"
"""

from __future__ import annotations

import torch.nn.functional as F

from losses import LossInputs, LossOutput, LossSpec


def sigmoid_margin_loss(inputs: LossInputs, *, beta: float = 0.1, gamma: float = 0.5) -> LossOutput:
    inputs.require(
        "example_sigmoid_margin", "chosen_logps", "rejected_logps", "ref_chosen_logps", "ref_rejected_logps"
    )
    chosen = (inputs.chosen_logps - inputs.ref_chosen_logps) * beta
    rejected = (inputs.rejected_logps - inputs.ref_rejected_logps) * beta
    loss = -F.logsigmoid(chosen - rejected - gamma).mean()
    chosen, rejected = chosen.detach(), rejected.detach()
    metrics = {
        "rewards/chosen": chosen.mean(),
        "rewards/rejected": rejected.mean(),
        "rewards/accuracy": (chosen > rejected).float().mean(),
        "rewards/margin": (chosen - rejected).mean(),
    }
    return LossOutput(loss, metrics)


spec = LossSpec(
    name="example_sigmoid_margin",
    fn=sigmoid_margin_loss,
    paradigm="offline",
    data="pairs",
    needs_reference=True,
    defaults={"beta": 0.1, "gamma": 0.5},
    paper="arXiv:2305.18290 Eq. 7 with a target margin (arXiv:2405.14734 Eq. 6)",
    version=1,
    description="Example plugin: DPO whose implicit-reward margin must exceed a target gamma.",
)
