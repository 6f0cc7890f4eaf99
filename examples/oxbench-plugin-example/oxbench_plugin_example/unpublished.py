r"""A loss that is *not* declared as an entry point: load it with ``--plugin``.

::

    oxbench run --plugin oxbench_plugin_example.unpublished --grid my_grid.yaml

``--plugin MODULE`` imports the module and registers every :class:`losses.LossSpec` defined
in it; the module name travels to the cell subprocesses in ``$OXBENCH_PLUGINS``, so the module
must be importable there too (installed, or on ``PYTHONPATH``).

The loss: a reference-free hinge on the length-normalised log-prob margin,

.. math::

    \mathcal{L} = \mathbb{E}\Big[\max\Big(0,\ \gamma - \beta\big(\tfrac{1}{|y_w|}\log\pi_\theta(y_w|x)
                  - \tfrac{1}{|y_l|}\log\pi_\theta(y_l|x)\big)\Big)\Big]

(SimPO's reward, arXiv:2405.14734, with the hinge of SLiC, arXiv:2305.10425, in place of the
logistic loss). Inputs: ``chosen_logps``, ``rejected_logps`` (B,) and ``chosen_mask``,
``rejected_mask`` (B, T) for the lengths. Reduction: mean over pairs.
"""

from __future__ import annotations

import torch

from losses import LossInputs, LossOutput, LossSpec


def hinge_mean_logp_loss(inputs: LossInputs, *, beta: float = 2.0, gamma: float = 1.0) -> LossOutput:
    inputs.require("example_unpublished", "chosen_logps", "rejected_logps", "chosen_mask", "rejected_mask")
    chosen = beta * inputs.chosen_logps / inputs.chosen_mask.sum(-1).clamp(min=1.0)
    rejected = beta * inputs.rejected_logps / inputs.rejected_mask.sum(-1).clamp(min=1.0)
    hinge = torch.relu(gamma - (chosen - rejected))
    return LossOutput(hinge.mean(), {"hinge/active_frac": (hinge > 0).float().mean()})


spec = LossSpec(
    name="example_unpublished",
    fn=hinge_mean_logp_loss,
    paradigm="offline_ref_free",
    data="pairs",
    needs_reference=False,
    defaults={"beta": 2.0, "gamma": 1.0},
    paper="arXiv:2405.14734 Eq. 6 reward, arXiv:2305.10425 hinge",
    version=1,
    description="Example --plugin loss: hinge on the length-normalised log-prob margin, no reference.",
)
