r"""CISPO: Clipped IS-weight Policy Optimization (MiniMax-M1, 2025).

Paper: arXiv:2506.13585, §3.1 (the CISPO objective).

.. math::

    \mathcal{L} = -\frac{1}{\sum_i |o_i|}\sum_{i=1}^{G}\sum_{t=1}^{|o_i|}
        \mathrm{sg}(\hat r_{i,t})\,\hat A_i\,\log\pi_\theta(o_{i,t}),
    \qquad \hat r_{i,t} = \min(r_{i,t},\ \varepsilon_{max})

Instead of clipping the token update (which zeroes the gradient of clipped tokens, often the
rare "fork" tokens of reasoning), CISPO clips the importance weight and stops its gradient:
every token keeps a REINFORCE gradient ``−sg(r̂)·Â·∇log π``. The paper sets no lower bound in
practice, so only the cap applies. ``epsilon_high`` is that absolute cap ``ε_max``, with TRL's
meaning for ``loss_type="cispo"`` (not ``1 + ε``); default 5.0 as TRL recommends (ScaleRL,
arXiv:2510.13786): the M1 paper does not give its value. Token-level mean over the batch;
``Â_i = (R_i − mean_g R)/(std_g R + 1e-4)``; no KL (β = 0; with ``beta > 0`` a per-token k3
KL, and the trainer must load a reference).

``clip_frac`` = share of tokens with ``r > ε_max`` and ``Â > 0`` (TRL's ``cispo_clip_ratio``).
Deviation from oxRL: oxRL clips two-sided to ``[1−0.2, 1+0.2]`` and multiplies the log-ratio;
the log-ratio has the same gradient as ``log π``, but the loss values differ.

``entropy_coef`` (default 0: no term): the GRPO family's entropy term, :mod:`losses._grpo_family`.
"""

from __future__ import annotations

from losses._families import rollouts_spec
from losses._online import (
    add_entropy_bonus,
    add_k3_kl,
    group_advantages,
    online_metrics,
    token_mean,
    token_ratio,
)
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def cispo_loss(
    inputs: LossInputs, *, epsilon_high: float = 5.0, beta: float = 0.0, entropy_coef: float = 0.0
) -> LossOutput:
    inputs.require(NAME, "token_logps", "mask", "rewards", "group_ids")
    adv = group_advantages(inputs.rewards, inputs.group_ids, scale=True)[:, None]
    ratio = token_ratio(inputs)
    weight = ratio.clamp(max=epsilon_high).detach()
    per_token = -weight * adv * inputs.token_logps
    per_token, kl = add_k3_kl(per_token, inputs, beta, NAME)
    per_token = add_entropy_bonus(per_token, inputs, entropy_coef, NAME)
    loss = token_mean(per_token, inputs.mask, inputs)  # over every response token of the rollout batch
    clipped = (ratio > epsilon_high) & (adv > 0)
    return LossOutput(loss, online_metrics(inputs, ratio=ratio, clipped=clipped, adv=adv[:, 0], kl=kl))


spec = rollouts_spec(
    NAME,
    cispo_loss,
    needs_reference=False,
    paper="arXiv:2506.13585 §3.1 (CISPO objective)",
    version=1,
    description="CISPO: REINFORCE on every token with a clipped, stop-gradient importance weight.",
)
