r"""SPIN: Self-Play fIne-tuNing (Chen et al., 2024).

Paper: arXiv:2401.01335, §4 (the SPIN loss with the logistic loss ℓ(t) = log(1 + e^{−t})).

.. math::

    \mathcal{L}_{SPIN}(\theta; \theta_t) = \mathbb{E}\Big[\ell\Big(
        \lambda \log\tfrac{p_\theta(y|x)}{p_{\theta_t}(y|x)} - \lambda \log\tfrac{p_\theta(y'|x)}{p_{\theta_t}(y'|x)}\Big)\Big],
    \qquad y \sim \text{gold (SFT data)},\ \ y' \sim p_{\theta_t}(\cdot|x)

The main player is the new policy ``p_θ``; the opponent is the previous iteration
``p_{θ_t}``, which both generated the rejected answers ``y'`` and is the reference. So
the loss is DPO's (``λ`` = ``beta``) with ``chosen`` = the gold answer
(``chosen_source="gold"``), ``rejected`` = the policy's own sample, and a reference that
the trainer replaces by the current policy at every SPIN iteration
(``updates_reference=True``) just before it regenerates the rejected answers
(``generates_own_pairs=True``).

Knobs read by the trainer (the loss ignores them): ``ref_model_sync_steps`` = optimizer
steps per SPIN iteration (``None``: one epoch over the prompts), and
``ref_model_mixup_alpha = 1.0``: the new reference is a hard copy of the policy
(TR-DPO's names, so the same trainer path serves both). ``β = 0.1`` (the paper's setting).

Inputs and metrics as ``dpo``. Reduction: mean over pairs. TRL has no SPIN trainer.
"""

from __future__ import annotations

from losses.dpo import dpo_loss
from losses.registry import LossSpec
from losses.types import LossInputs, LossOutput


def spin_loss(
    inputs: LossInputs,
    *,
    beta: float = 0.1,
    ref_model_sync_steps: int | None = None,
    ref_model_mixup_alpha: float = 1.0,
) -> LossOutput:
    """SPIN's logistic loss; ``ref_model_sync_steps``/``ref_model_mixup_alpha`` are read by the trainer."""
    inputs.require("spin", "chosen_logps", "rejected_logps", "ref_chosen_logps", "ref_rejected_logps")
    return dpo_loss(inputs, beta=beta)


spec = LossSpec(
    name="spin",
    fn=spin_loss,
    paradigm="online",
    data="pairs",
    needs_reference=True,
    updates_reference=True,
    generates_own_pairs=True,
    chosen_source="gold",
    defaults={"beta": 0.1, "ref_model_sync_steps": None, "ref_model_mixup_alpha": 1.0},
    paper="arXiv:2401.01335 §4 (SPIN loss, logistic ℓ)",
    version=1,
    description="SPIN: DPO of gold answers over the previous iteration's own samples, reference = previous iteration.",
)
