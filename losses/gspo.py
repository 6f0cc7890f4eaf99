r"""GSPO: Group Sequence Policy Optimization (Zheng et al., 2025, Qwen).

Paper: arXiv:2507.18071, the GSPO objective (§4.1).

.. math::

    \mathcal{L} = -\frac{1}{G}\sum_{i=1}^{G}
        \min\big(s_i \hat A_i,\ \mathrm{clip}(s_i, 1-\varepsilon, 1+\varepsilon_{high})\hat A_i\big),
    \qquad s_i = \exp\Big(\frac{1}{|o_i|}\sum_t \log\frac{\pi_\theta(o_{i,t})}{\pi_{old}(o_{i,t})}\Big)

One importance ratio per response, the geometric mean of its token ratios, so clipping acts
on whole responses (TRL ``importance_sampling_level="sequence"`` with ``loss_type="grpo"``).
The clip range is tiny because ``s_i`` is length-normalised: ``ε = 3e-4``,
``ε_high = 4e-4`` (paper §5.1). ``Â_i = (R_i − mean_g R)/(std_g R + 1e-4)`` (GRPO's group
z-score, TRL's eps). No KL (β = 0); with ``beta > 0`` a per-token k3 KL is added and
averaged per response before the mean over responses, as TRL does (the trainer must then
load a reference: ``needs_reference`` is False).
``clip_frac`` and ``ratio_mean`` are over responses. On-policy ``s_i = 1`` with gradient
``mean_t ∇log π_θ(o_{i,t})``.

``entropy_coef`` (default 0: no term): the GRPO family's entropy term, :mod:`losses._grpo_family`.
"""

from __future__ import annotations

from losses._common import masked_mean
from losses._families import rollouts_spec
from losses._online import (
    add_entropy_bonus,
    add_k3_kl,
    clipped_surrogate,
    group_advantages,
    online_metrics,
    sequence_ratio,
)
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def gspo_loss(
    inputs: LossInputs,
    *,
    epsilon: float = 0.0003,
    epsilon_high: float = 0.0004,
    beta: float = 0.0,
    entropy_coef: float = 0.0,
) -> LossOutput:
    inputs.require(NAME, "token_logps", "mask", "rewards", "group_ids")
    adv = group_advantages(inputs.rewards, inputs.group_ids, scale=True)
    ratio = sequence_ratio(inputs)
    per_seq, clipped = clipped_surrogate(ratio, adv, epsilon, epsilon_high)
    per_token, kl = add_k3_kl(per_seq[:, None].expand_as(inputs.mask), inputs, beta, NAME)
    per_token = add_entropy_bonus(per_token, inputs, entropy_coef, NAME)
    loss = masked_mean(per_token, inputs.mask).mean()
    return LossOutput(loss, online_metrics(inputs, ratio=ratio, clipped=clipped, adv=adv, kl=kl))


spec = rollouts_spec(
    NAME,
    gspo_loss,
    needs_reference=False,
    paper="arXiv:2507.18071 §4.1 (GSPO objective)",
    version=1,
    description="GSPO: one length-normalised importance ratio per response, clipped at the sequence level.",
)
