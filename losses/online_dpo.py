r"""Online DPO: DPO on pairs sampled from the current policy (Guo et al., 2024, "OAIF").

Paper: arXiv:2402.04792, Algorithm 1 (online AI feedback) with the DPO loss of arXiv:2305.18290 Eq. 7.

.. math::

    \mathcal{L} = -\mathbb{E}\Big[\log\sigma\Big(\beta\big(\log\tfrac{\pi_\theta(y^+|x)}{\pi_{ref}(y^+|x)}
                  - \log\tfrac{\pi_\theta(y^-|x)}{\pi_{ref}(y^-|x)}\big)\Big)\Big]

The loss is DPO's; what makes it online is the data. At every step the trainer samples
responses to each prompt from the *current* policy (``generates_own_pairs``), scores them
(the paper asks an LLM annotator; here the task's grader) and keeps the better one as
``y^+`` and the worse as ``y^-`` (``chosen_source="self_play"``). The reference stays the
initial (SFT) policy. ``β = 0.1`` (paper; TRL's OnlineDPOConfig default).

Inputs: ``chosen_logps``, ``rejected_logps``, ``ref_chosen_logps``, ``ref_rejected_logps``
(B,), summed over response tokens; optional ``chosen_rewards``/``rejected_rewards`` (the
grader's scores) add ``scores/margin``. Reduction: mean over pairs. Metrics: DPO's implicit
rewards. Deviation from TRL's OnlineDPOTrainer: none in the loss (it is TRL's
``loss_type="sigmoid"``); pair selection, which TRL does inside its training step, is the
trainer's job here.
"""

from __future__ import annotations

from losses._common import PAIR_FIELDS
from losses._families import self_play_pairs_spec
from losses.dpo import dpo_loss
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def score_metrics(inputs: LossInputs) -> dict[str, float]:
    """Grader-score margin of the selected pairs, when the trainer passes the scores."""
    if inputs.chosen_rewards is None or inputs.rejected_rewards is None:
        return {}
    return {"scores/margin": float((inputs.chosen_rewards - inputs.rejected_rewards).float().mean())}


def online_dpo_loss(inputs: LossInputs, *, beta: float = 0.1) -> LossOutput:
    inputs.require(NAME, *PAIR_FIELDS)
    out = dpo_loss(inputs, beta=beta)
    return LossOutput(out.loss, {**out.metrics, **score_metrics(inputs)})


spec = self_play_pairs_spec(
    NAME,
    online_dpo_loss,
    chosen_source="self_play",
    paper="arXiv:2402.04792 Alg. 1 (DPO loss, arXiv:2305.18290 Eq. 7)",
    version=1,
    description="Online DPO: DPO on best-vs-worst pairs sampled from the current policy each step.",
)
