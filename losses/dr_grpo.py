r"""Dr. GRPO: GRPO done right (Liu et al., 2025, "Understanding R1-Zero-Like Training").

Paper: arXiv:2503.20783, §3.2 (the Dr. GRPO objective), the unbiased form of GRPO.

.. math::

    \mathcal{L} = -\frac{1}{G\,L_{max}} \sum_{i=1}^{G} \sum_{t=1}^{|o_i|}
        \min\big(r_{i,t}\tilde A_i,\ \mathrm{clip}(r_{i,t}, 1-\varepsilon, 1+\varepsilon_{high})\tilde A_i\big),
    \qquad \tilde A_i = R_i - \mathrm{mean}_g R

Two biases of GRPO are removed: no ``std_g`` division (question-difficulty bias) and no
``1/|o_i|`` (length bias); the token sum is divided by the constant ``G·L_max`` instead
(TRL ``loss_type="dr_grpo"`` with ``scale_rewards="none"``). ``G`` = rollouts in the batch (B).

``L_max`` is the generation limit (the paper's and TRL's ``max_completion_length``), a constant
of the run: the hyper-parameter ``max_completion_length`` when set, else
``LossInputs.max_completion_length`` (which the trainer fills with the rollouts' ``max_new_tokens``),
else a ``ValueError``. It is never the mask's width: in the trainer that is the padded
prompt + completion width of the micro-batch, which moves with the prompt length, so the
"constant" would re-weight every batch (version 1 did this; fixed in version 2).

Inputs: ``token_logps``, ``mask`` (B, T) — T may include prompt positions, where the mask is 0 —
``rewards``, ``group_ids``, and ``max_completion_length`` unless the hyper-parameter is set.

Defaults: ε = ε_high = 0.2, β = 0 (the paper drops the KL term); with ``beta > 0`` a k3 KL
on ``ref_token_logps`` is added per token before the same reduction, as TRL does (the
trainer must then load a reference: ``needs_reference`` is False).
Deviation: flat groups get advantage exactly 0 (TRL: ~1e-8 residue).

The per-token pipeline (the ratio and its ``is_correction``/``is_cap``, the clip, ``beta``'s k3 KL,
``entropy_coef``) is the GRPO family's: :mod:`losses._grpo_family`.
"""

from __future__ import annotations

from losses._families import rollouts_spec
from losses._grpo_family import rollout_advantages, token_losses
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def generation_limit(inputs: LossInputs, max_completion_length: int | None) -> int:
    """``L_max``: the hyper-parameter if set, else ``inputs.max_completion_length``; never the mask width."""
    length = max_completion_length if max_completion_length is not None else inputs.max_completion_length
    if length is None:
        raise ValueError(
            f"loss {NAME!r} needs the generation limit L_max: set the hyper-parameter max_completion_length"
            " or LossInputs.max_completion_length (the trainer fills it for online rollouts)"
        )
    if length < 1:
        raise ValueError(f"loss {NAME!r}: max_completion_length must be a positive int, got {length}")
    return int(length)


def dr_grpo_loss(
    inputs: LossInputs,
    *,
    beta: float = 0.0,
    epsilon: float = 0.2,
    epsilon_high: float = 0.2,
    max_completion_length: int | None = None,
    entropy_coef: float = 0.0,
    is_correction: str = "none",
    is_cap: float = 2.0,
) -> LossOutput:
    adv = rollout_advantages(inputs, NAME, scale=False)
    length = generation_limit(inputs, max_completion_length)
    per_token, metrics = token_losses(
        inputs, NAME, adv, epsilon, epsilon_high, beta, entropy_coef, is_correction, is_cap
    )
    return LossOutput((per_token * inputs.mask).sum() / (inputs.mask.size(0) * length), metrics)


spec = rollouts_spec(
    NAME,
    dr_grpo_loss,
    needs_reference=False,
    paper="arXiv:2503.20783 §3.2 (Dr. GRPO objective)",
    version=2,
    description="Dr. GRPO: GRPO without std and length normalisation (token sum / constant G*L_max).",
)
