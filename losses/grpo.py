r"""GRPO: Group Relative Policy Optimization (Shao et al., 2024, DeepSeekMath).

Paper: arXiv:2402.03300, Eq. 3 (outcome supervision, §4.1.2), KL estimator Eq. 4.

.. math::

    \mathcal{J} = \frac{1}{G}\sum_{i=1}^{G}\frac{1}{|o_i|}\sum_{t=1}^{|o_i|}
        \Big\{\min\big(r_{i,t}\hat A_i,\ \mathrm{clip}(r_{i,t}, 1-\varepsilon, 1+\varepsilon)\hat A_i\big)
        - \beta\,\mathbb{D}_{KL}[\pi_\theta \| \pi_{ref}]_{i,t}\Big\},
    \qquad \mathcal{L} = -\mathcal{J}

``r = π_θ(o_t)/π_old(o_t)`` per token; ``Â_i = (R_i − mean_g R) / (std_g R + 1e-4)`` over the
rollouts of the same prompt (``group_ids``), unbiased std, eps 1e-4 as TRL; k3 KL
``π_ref/π_θ − log(π_ref/π_θ) − 1``. Reduction: mean over each response's tokens, then mean over
responses (the paper's ``1/G Σ 1/|o_i| Σ_t``; TRL ``loss_type="grpo"``). Defaults: β = 0.04
(paper §4.2), ε = ε_high = 0.2 (PPO's clip, TRL's default).

Inputs: ``token_logps``, ``mask``, ``rewards``, ``group_ids``, ``ref_token_logps``;
``old_token_logps=None`` means on-policy (ratio 1, gradient of ``log π_θ``).

Deviations: TRL multiplies the KL term by the importance ratio by default
(``use_bias_correction_kl=True``); the paper does not, nor do we. A group whose rewards are all
equal gets advantage exactly 0 (TRL leaves a ~1e-8/1e-4 rounding residue).

The per-token pipeline (the ratio and its ``is_correction``/``is_cap``, the clip, ``beta``'s k3 KL,
``entropy_coef``) is the GRPO family's: :mod:`losses._grpo_family`.
"""

from __future__ import annotations

from losses._common import masked_mean
from losses._families import rollouts_spec
from losses._grpo_family import rollout_advantages, token_losses
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def grpo_loss(
    inputs: LossInputs,
    *,
    beta: float = 0.04,
    epsilon: float = 0.2,
    epsilon_high: float = 0.2,
    entropy_coef: float = 0.0,
    is_correction: str = "none",
    is_cap: float = 2.0,
) -> LossOutput:
    adv = rollout_advantages(inputs, NAME, scale=True)
    per_token, metrics = token_losses(
        inputs, NAME, adv, epsilon, epsilon_high, beta, entropy_coef, is_correction, is_cap
    )
    return LossOutput(masked_mean(per_token, inputs.mask).mean(), metrics)


spec = rollouts_spec(
    NAME,
    grpo_loss,
    needs_reference=True,
    paper="arXiv:2402.03300 Eq. 3",
    version=1,
    description="GRPO: group z-scored advantages, clipped token ratio, per-response token mean, k3 KL.",
)
