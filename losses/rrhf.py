r"""RRHF: Rank Responses to align Human Feedback (Yuan et al., 2023).

Paper: arXiv:2304.05302, Eqs. 1-4; authors' code GanjinZero/RRHF ``train.py`` (``RRHFTrainer``).

.. math::

    p_i = \frac{\sum_t \log\pi_\theta(y_{i,t}\mid x, y_{i,<t})}{\|y_i\|^{\,\ell}}, \qquad
    \mathcal{L}_{rank} = \sum_{r_i < r_j} \max(0,\; p_i - p_j)

    \mathcal{L}_{ft} = -\frac{1}{|y_{i'}|}\sum_t \log\pi_\theta(y_{i',t}\mid x, y_{i',<t}),
    \quad i' = \arg\max_i r_i, \qquad \mathcal{L} = w\,\mathcal{L}_{rank} + \mathcal{L}_{ft}

With pairs (two responses per prompt, the chosen ranked above the rejected) the ranking sum has
one term, ``max(0, p_l - p_w)``, and the best response is the chosen one. ``ℓ`` is
``length_penalty`` (1 = the paper's length-normalised score); ``w`` is ``rrhf_weight``.

``nll_reduction`` (default ``"mean"``): ``L_ft`` as the authors' code computes it, a token mean of
the best response's log-probs (``sft_loss = -logit_label[best].mean()``), shown above. ``"sum"``
is the paper's ``L_ft`` read literally, the summed log-prob (|y_w| times more weight). Version 1
used ``"sum"``; version 2 defaults to ``"mean"``.

Inputs: ``chosen_logps``, ``rejected_logps`` (B,) summed, ``chosen_mask``, ``rejected_mask``.
Reduction: both terms per prompt, averaged over the B prompts (the authors train on one prompt
and its candidates per step). Metrics: the scores ``p`` as rewards (detached), accuracy, margin;
``rank_loss``, ``nll``. Defaults: ``rrhf_weight = 1`` (the authors' released scripts ``train.sh``,
``train_wombat7b*.sh`` pass ``--rrhf_weight 1``; the argument's default in ``train.py`` is 100) and
``length_penalty = 1`` (``train.py``).

Deviation from the authors' code: their token mean divides by the padded width of the prompt's
batch of candidates, prompt positions and padding included (``labels == -100`` count as zeros),
so it depends on the prompt length and on the longest candidate; ours divides by the chosen
response's own length |y_w|, which is padding-invariant (ours = theirs × L_padded / |y_w|).
Not in TRL; the reference study (oxRL) has no RRHF.
"""

from __future__ import annotations

from losses._common import lengths, reward_metrics
from losses._families import ref_free_pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def rrhf_loss(
    inputs: LossInputs, *, rrhf_weight: float = 1.0, length_penalty: float = 1.0, nll_reduction: str = "mean"
) -> LossOutput:
    inputs.require(NAME, "chosen_logps", "rejected_logps", "chosen_mask", "rejected_mask")
    chosen = inputs.chosen_logps / lengths(inputs.chosen_mask) ** length_penalty
    rejected = inputs.rejected_logps / lengths(inputs.rejected_mask) ** length_penalty
    rank = (rejected - chosen).clamp(min=0).mean()
    if nll_reduction == "mean":
        nll = -(inputs.chosen_logps / lengths(inputs.chosen_mask)).mean()
    elif nll_reduction == "sum":
        nll = -inputs.chosen_logps.mean()
    else:
        raise ValueError(f"loss {NAME!r}: nll_reduction {nll_reduction!r} is not one of mean, sum")
    metrics = reward_metrics(chosen, rejected)
    metrics.update({"rank_loss": rank.detach(), "nll": nll.detach()})
    return LossOutput(rrhf_weight * rank + nll, metrics)


spec = ref_free_pairs_spec(
    NAME,
    rrhf_loss,
    paper="arXiv:2304.05302 Eqs. 1-4",
    version=2,
    description="RRHF: hinge ranking loss on length-normalised log-probs plus the NLL of the best (chosen) response.",
)
