r"""BCO: binary classifier optimisation, unpaired form (Jung et al., 2024), as TRL's ``BCOTrainer``.

Paper: arXiv:2404.04656, Sec. 3 (BCE loss with reward shift δ, on binary feedback); TRL
``BCOTrainer.bco_loss`` (``trl/trainer/bco_trainer.py``, TRL 0.21; TRL 1.x no longer ships it).

.. math::

    r_i = \beta\log\tfrac{\pi_\theta(y_i|x_i)}{\pi_{ref}(y_i|x_i)}

    \ell_i = \begin{cases} -\log\sigma(r_i - \delta) & y_i \text{ desirable (label 1)} \\
                           -\log\sigma\big(-(r_i - \delta)\big) & y_i \text{ undesirable (label 0)} \end{cases},
    \qquad \mathcal{L} = \frac1B\sum_i \ell_i

Each labelled completion is one example of a binary classifier whose logit is the implicit reward
``r``; no example is paired with another, so a file of thumbs-up / thumbs-down completions (TRL's
unpaired preference type: prompt, completion, label) trains it as it is. :mod:`losses.bco` is the
paired form (TRL's DPO ``loss_type="bco_pair"``), the same BCE on a pair's two completions.

The reward shift δ is the running mean of every detached reward seen so far, this batch's included
(TRL updates its ``RunningMoments`` with the batch's rewards, then reads the mean). It is the loss's
state (``initial_state``: ``reward_mean``, ``count``), kept by :mod:`losses.bco`'s machinery
(:func:`losses.bco.reward_shift_delta`), with the same ``reward_shift`` choices: ``"running"``
(default, TRL's and the paper's), ``"batch"`` (the batch's mean) and ``"none"`` (δ = 0).

Inputs: ``logps``, ``ref_logps`` (B,) summed over completion tokens (TRL's ``average_log_prob=False``);
``labels`` (B,) bool, True = desirable. It does not read KTO's mismatched-pair ``kl_logps`` /
``ref_kl_logps`` (``reads_kl_pairs=False``: the trainer leaves them None and skips their forward
pass). Reduction: mean over all B examples, desirable and undesirable together (TRL: ``nanmean`` of the concatenated per-example losses).
Metrics: ``rewards/chosen`` and ``rewards/rejected`` (mean ``r`` over desirable / undesirable examples,
present only when the batch has some), their ``rewards/margin``, and ``bco/delta``.
Defaults: β = 0.1 (TRL's ``BCOConfig``), ``reward_shift="running"``.

Deviations from TRL's ``BCOTrainer``:

- No underlying-distribution matching (UDM): TRL can weight each undesirable example by a density
  ratio from a logistic-regression classifier on prompt embeddings (on only when an
  ``embedding_func`` is given; off by default). It needs an embedding model and a classifier fitted
  before training, which is not a function of log-probs; here every weight is 1, TRL's default.
- The running mean: TRL updates it at every forward (each micro-batch of gradient accumulation) with
  the rewards of every rank. Here each micro-batch updates the previous step's state with its own
  rewards and the trainer averages the proposals of the step (see :mod:`losses.bco`), which for
  equal micro-batches leaves the same mean, over every reward seen, at the end of each step; within
  a step an accumulated micro-batch does not see the step's earlier micro-batches. On one process,
  one micro-batch a step, it is TRL's.
"""

from __future__ import annotations

import torch.nn.functional as F

from losses._families import unpaired_spec
from losses.bco import INITIAL_STATE, reward_shift_delta
from losses.kto import label_reward_metrics
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def bco_unpaired_loss(inputs: LossInputs, *, beta: float = 0.1, reward_shift: str = "running") -> LossOutput:
    inputs.require(NAME, "logps", "ref_logps", "labels")
    labels = inputs.labels.bool()
    rewards = beta * (inputs.logps - inputs.ref_logps)
    delta, state = reward_shift_delta(rewards, reward_shift, inputs.state, name=NAME)
    logits = rewards - delta
    losses = -F.logsigmoid(logits.where(labels, -logits))
    metrics = {**label_reward_metrics(rewards.detach(), labels), "bco/delta": delta}
    return LossOutput(losses.mean(), metrics, state=state)


spec = unpaired_spec(
    NAME,
    bco_unpaired_loss,
    initial_state=INITIAL_STATE,
    reads_kl_pairs=False,  # no KL reference point: the trainer skips the mismatched pairs' forward pass
    paper="arXiv:2404.04656 Sec. 3 (BCE with reward shift, running mean; unpaired, TRL BCOTrainer)",
    version=1,
    description="Unpaired BCO: BCE on each labelled completion's implicit reward, desirable = 1, shifted by δ.",
)
