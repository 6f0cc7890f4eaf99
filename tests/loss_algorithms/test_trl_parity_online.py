"""Parity of the online losses with TRL 1.16's own loss code, at rtol 1e-5.

Constructing GRPOTrainer / RLOOTrainer / OnlineDPOTrainer needs a model, a dataset, reward
functions and an Accelerator; instead TRL's *unbound* methods are called on a
``types.SimpleNamespace`` carrying exactly the attributes they read
(``GRPOTrainer._compute_loss``, ``RLOOTrainer._compute_loss``,
``OnlineDPOTrainer.training_step``), with the model forward replaced by the same log-prob
tensors our losses receive. Loss values, gradients w.r.t. the policy log-probs and the
clip/KL metrics are compared.

TRL computes advantages inside its generation step (``_generate_and_score_completions``),
which cannot be called without a model; the tests mirror those lines (TRL's ``nanstd``,
contiguous groups of ``num_generations``) and compare with ours on shuffled group ids.

Mapping: sgrpo ↔ ``loss_type="bnpo"``; grpo ↔ ``"grpo"``; dr_grpo ↔ ``"dr_grpo"``;
dapo ↔ ``"dapo"`` (normaliser = tokens of groups with signal); gspo ↔ ``"grpo"`` with
``importance_sampling_level="sequence"``; cispo ↔ ``"cispo"``; rloo ↔ RLOOTrainer;
online_dpo ↔ OnlineDPOTrainer (``loss_type="sigmoid"``). TRL's default
``use_bias_correction_kl=True`` multiplies the KL by the ratio, which the GRPO paper does
not: parity is run with it off.
"""

from __future__ import annotations

import os
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from trl.experimental.online_dpo.online_dpo_trainer import OnlineDPOTrainer  # noqa: E402
from trl.trainer.grpo_trainer import GRPOTrainer  # noqa: E402
from trl.trainer.rloo_trainer import RLOOTrainer  # noqa: E402
from trl.trainer.utils import nanstd  # noqa: E402

import losses  # noqa: E402
from losses import LossInputs  # noqa: E402
from losses._online import group_advantages  # noqa: E402
from losses.rloo import kl_penalised_rewards, leave_one_out_advantages  # noqa: E402
from losses.sgrpo import ADV_EPS as SGRPO_EPS  # noqa: E402

pytestmark = pytest.mark.slow  # importing TRL takes ~10 s

RTOL, ATOL = 1e-5, 1e-10
G = 4  # rollouts per prompt


# --- fixtures: one batch of rollouts ---------------------------------------------------------


def rollouts(seed: int, *, old_scale: float = 0.3, flat_group: bool = False) -> dict:
    """3 prompts × G rollouts, right-padded, random log-probs; policy log-probs are a grad leaf.

    float64, so that a mismatch at rtol 1e-5 is a difference of formula, not of rounding
    (RLOO's on-policy loss is a near-zero sum of cancelling terms).
    """
    g = torch.Generator().manual_seed(seed)
    b, t = 3 * G, 7
    f64 = {"dtype": torch.float64, "generator": g}
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).double()
    logps = -torch.rand(b, t, **f64) * 3 * mask
    old = (logps + old_scale * torch.randn(b, t, **f64)) * mask
    ref = (logps + 0.3 * torch.randn(b, t, **f64)) * mask
    rewards = torch.randint(0, 3, (b,), generator=g).double()
    if flat_group:
        rewards[:G] = 1.0
    return {
        "logps": logps.requires_grad_(True),
        "old": old,
        "ref": ref,
        "mask": mask,
        "rewards": rewards,
        "group_ids": torch.arange(3).repeat_interleave(G),
    }


def our_inputs(r: dict, *, on_policy: bool = False) -> LossInputs:
    return LossInputs(
        token_logps=r["logps"],
        old_token_logps=None if on_policy else r["old"],
        ref_token_logps=r["ref"],
        mask=r["mask"],
        rewards=r["rewards"],
        group_ids=r["group_ids"],
    )


def grad_of(loss: torch.Tensor, leaf: torch.Tensor) -> torch.Tensor:
    (grad,) = torch.autograd.grad(loss, leaf)
    return grad


# --- TRL calls -----------------------------------------------------------------------------


def _accelerator() -> SimpleNamespace:
    return SimpleNamespace(
        num_processes=1,
        reduce=lambda x, reduction="sum": x,
        gather=lambda x: x,
        gather_for_metrics=lambda x: x,
        backward=None,
    )


def _trainer(logps: torch.Tensor, metrics: dict, **attrs) -> SimpleNamespace:
    """The attributes a TRL trainer's unbound ``_compute_loss`` reads, on precomputed ``logps``
    (zero entropy), training, one process; ``attrs``: the trainer's own."""
    return SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (logps, torch.zeros_like(logps), None),
        aux_loss_enabled=False,
        model=SimpleNamespace(training=True),
        accelerator=_accelerator(),
        _metrics=metrics,
        **attrs,
    )


def trl_grpo(r: dict, adv: torch.Tensor, *, on_policy: bool = False, **attrs) -> tuple[torch.Tensor, dict]:
    """``GRPOTrainer._compute_loss`` on the batch ``r``; ``attrs`` = loss_type, beta, epsilon_*, ..."""
    logps, mask = r["logps"], r["mask"]
    b, t = logps.shape
    metrics = defaultdict(lambda: defaultdict(list))
    trainer = _trainer(
        logps,
        metrics,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level="token",
        use_vllm=False,
        current_gradient_accumulation_steps=1,
        max_completion_length=t,
        _entropy_bonus_enabled=False,
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1),
    )
    num_items = attrs.pop("num_items_in_batch", mask.sum())
    for key, value in attrs.items():
        setattr(trainer, key, value)
    inputs = {
        "prompt_ids": torch.zeros(b, 1, dtype=torch.long),
        "prompt_mask": torch.ones(b, 1, dtype=torch.long),
        "completion_ids": torch.zeros(b, t, dtype=torch.long),
        "completion_mask": mask,
        "advantages": adv,
        "old_per_token_logps": None if on_policy else r["old"],
        "ref_per_token_logps": r["ref"],
        "num_items_in_batch": num_items,
    }
    loss = GRPOTrainer._compute_loss(trainer, None, inputs)
    return loss, {k: v[-1] for k, v in metrics["train"].items()}


def trl_rloo(r: dict, adv: torch.Tensor, *, epsilon: float) -> tuple[torch.Tensor, dict]:
    logps, mask = r["logps"], r["mask"]
    b, t = logps.shape
    metrics = defaultdict(lambda: defaultdict(list))
    trainer = _trainer(logps, metrics, epsilon_low=epsilon, epsilon_high=epsilon)
    inputs = {
        "prompt_ids": torch.zeros(b, 1, dtype=torch.long),
        "prompt_mask": torch.ones(b, 1, dtype=torch.long),
        "completion_ids": torch.zeros(b, t, dtype=torch.long),
        "completion_mask": mask,
        "old_logps": (r["old"] * mask).sum(1),
        "advantages": adv,
    }
    loss = RLOOTrainer._compute_loss(trainer, None, inputs)
    return loss, {k: v[-1] for k, v in metrics["train"].items()}


def trl_group_advantages(rewards: torch.Tensor, *, scale: bool) -> torch.Tensor:
    """The lines of ``GRPOTrainer._generate_and_score_completions`` (sum_then_normalize, scale "group"/"none")."""
    mean = torch.nanmean(rewards.view(-1, G), dim=1).repeat_interleave(G, dim=0)
    std = nanstd(rewards.view(-1, G), dim=1).repeat_interleave(G, dim=0)
    adv = rewards - mean
    return adv / (std + 1e-4) if scale else adv


def trl_rloo_advantages(rewards: torch.Tensor, kl_sum: torch.Tensor, beta: float) -> torch.Tensor:
    """The lines of ``RLOOTrainer._generate_and_score_completions`` (KL in reward, leave-one-out)."""
    rewards = rewards - beta * kl_sum
    grouped = rewards.view(-1, G)
    baselines = (grouped.sum(dim=1, keepdim=True) - grouped) / (G - 1)
    return rewards - baselines.view(-1)


def assert_close(a, b) -> None:
    torch.testing.assert_close(torch.as_tensor(a).double(), torch.as_tensor(b).double(), rtol=RTOL, atol=ATOL)


# --- advantages --------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [True, False])
def test_group_advantages_match_trl_on_shuffled_groups(scale):
    r = rollouts(0)
    perm = torch.randperm(3 * G, generator=torch.Generator().manual_seed(1))
    ours = group_advantages(r["rewards"][perm], r["group_ids"][perm], scale=scale)
    assert_close(ours, trl_group_advantages(r["rewards"], scale=scale)[perm])


def test_rloo_advantages_match_trl_with_kl_in_reward():
    r = rollouts(2)
    inputs = our_inputs(r)
    rewards, kl = kl_penalised_rewards(inputs, beta=0.05)
    ours = leave_one_out_advantages(rewards, r["group_ids"])
    assert_close(ours, trl_rloo_advantages(r["rewards"], (kl * r["mask"]).sum(1), 0.05))


# --- GRPOTrainer loss types ---------------------------------------------------------------------


def _check(ours, trl_loss, leaf) -> None:
    assert_close(ours.loss, trl_loss)
    assert_close(grad_of(ours.loss, leaf), grad_of(trl_loss, leaf))


@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_sgrpo_matches_trl_bnpo(beta):
    r = rollouts(3)
    adv = group_advantages(r["rewards"], r["group_ids"], scale=True, eps=SGRPO_EPS)
    ours = losses.get("sgrpo")(our_inputs(r), beta=beta)
    trl_loss, m = trl_grpo(r, adv, loss_type="bnpo", beta=beta, epsilon_low=0.2, epsilon_high=0.2)
    assert_close(ours.metrics["clip_frac"], m["clip_ratio/region_mean"])
    if beta:
        assert_close(ours.metrics["kl"], m["kl"])
    _check(ours, trl_loss, r["logps"])


@pytest.mark.parametrize("on_policy", [False, True])
def test_grpo_matches_trl_grpo(on_policy):
    r = rollouts(4)
    adv = trl_group_advantages(r["rewards"], scale=True)
    ours = losses.get("grpo")(our_inputs(r, on_policy=on_policy))
    trl_loss, m = trl_grpo(
        r, adv, on_policy=on_policy, loss_type="grpo", beta=0.04, epsilon_low=0.2, epsilon_high=0.2
    )
    assert_close(ours.metrics["clip_frac"], m["clip_ratio/region_mean"])
    assert_close(ours.metrics["kl"], m["kl"])
    _check(ours, trl_loss, r["logps"])


@pytest.mark.parametrize("limit", ["width", 16])
@pytest.mark.parametrize("from_inputs", [True, False], ids=["LossInputs", "hparam"])
def test_dr_grpo_matches_trl_dr_grpo(limit, from_inputs):
    """TRL divides by its configured ``max_completion_length`` (the generation limit); ours takes it
    from ``LossInputs.max_completion_length`` (as the trainer fills it) or from the hyper-parameter."""
    r = rollouts(5)
    adv = trl_group_advantages(r["rewards"], scale=False)
    length = r["mask"].size(1) if limit == "width" else limit
    inputs = our_inputs(r)
    if from_inputs:
        inputs.max_completion_length = length
    ours = losses.get("dr_grpo")(inputs, **({} if from_inputs else {"max_completion_length": length}))
    trl_loss, _ = trl_grpo(
        r, adv, loss_type="dr_grpo", beta=0.0, epsilon_low=0.2, epsilon_high=0.2, max_completion_length=length
    )
    _check(ours, trl_loss, r["logps"])


@pytest.mark.parametrize("flat_group", [False, True])
def test_dapo_matches_trl_dapo_normalised_by_kept_tokens(flat_group):
    """With a flat group TRL's ``num_items_in_batch`` is set to the tokens of the other groups."""
    r = rollouts(6, flat_group=flat_group)
    adv = trl_group_advantages(r["rewards"], scale=True)
    kept_tokens = r["mask"][G:].sum() if flat_group else r["mask"].sum()
    ours = losses.get("dapo")(our_inputs(r))
    trl_loss, m = trl_grpo(
        r, adv, loss_type="dapo", beta=0.0, epsilon_low=0.2, epsilon_high=0.28, num_items_in_batch=kept_tokens
    )
    assert ours.metrics["groups_kept_frac"] == pytest.approx(2 / 3 if flat_group else 1.0)
    assert_close(ours.metrics["clip_frac"], m["clip_ratio/region_mean"])
    _check(ours, trl_loss, r["logps"])


@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_gspo_matches_trl_sequence_level(beta):
    r = rollouts(7, old_scale=1e-3)  # sequence log-ratios of order 1e-3/sqrt(len): some inside ±4e-4
    adv = trl_group_advantages(r["rewards"], scale=True)
    ours = losses.get("gspo")(our_inputs(r), beta=beta)
    trl_loss, m = trl_grpo(
        r,
        adv,
        loss_type="grpo",
        importance_sampling_level="sequence",
        beta=beta,
        epsilon_low=3e-4,
        epsilon_high=4e-4,
    )
    assert 0.0 < ours.metrics["clip_frac"] < 1.0
    assert_close(ours.metrics["clip_frac"], m["clip_ratio/region_mean"])
    _check(ours, trl_loss, r["logps"])


def test_cispo_matches_trl_cispo():
    r = rollouts(8, old_scale=0.5)
    adv = trl_group_advantages(r["rewards"], scale=True)
    ours = losses.get("cispo")(our_inputs(r), epsilon_high=1.3)
    trl_loss, m = trl_grpo(r, adv, loss_type="cispo", beta=0.0, epsilon_low=0.2, epsilon_high=1.3)
    assert 0.0 < ours.metrics["clip_frac"] < 1.0
    assert_close(ours.metrics["clip_frac"], m["cispo_clip_ratio"])
    _check(ours, trl_loss, r["logps"])


# --- RLOOTrainer ---------------------------------------------------------------------------


@pytest.mark.parametrize("beta", [0.0, 0.05])
def test_rloo_matches_trl_rloo(beta):
    r = rollouts(9, old_scale=0.05)  # whole-sequence ratios: keep them near the ±0.2 band
    kl_sum = ((r["old"] - r["ref"]) * r["mask"]).sum(1)
    adv = trl_rloo_advantages(r["rewards"], kl_sum, beta)
    ours = losses.get("rloo")(our_inputs(r), beta=beta)
    trl_loss, m = trl_rloo(r, adv, epsilon=0.2)
    assert_close(ours.metrics["clip_frac"], m["clip_ratio/region_mean"])
    _check(ours, trl_loss, r["logps"])


# --- OnlineDPOTrainer ------------------------------------------------------------------------


def trl_online_dpo(
    policy: torch.Tensor, ref: torch.Tensor, mask: torch.Tensor, rewards: torch.Tensor, beta: float
):
    """``OnlineDPOTrainer.training_step``: 2 samples per prompt (rows i and i+B), best one chosen."""
    captured = []
    accelerator = _accelerator()
    accelerator.backward = lambda loss, **kw: captured.append(loss)
    model = SimpleNamespace(train=lambda: None, logps=policy)
    trainer = SimpleNamespace(
        args=SimpleNamespace(
            use_vllm=False,
            missing_eos_penalty=None,
            loss_type="sigmoid",
            torch_empty_cache_steps=None,
            optim="adamw_torch",
            n_gpu=1,
            gradient_accumulation_steps=1,
        ),
        _generate=lambda m, prompts, images: (
            None,
            None,
            torch.zeros_like(mask, dtype=torch.long),
            mask,
            None,
        ),
        eos_token_ids=[1],
        _forward=lambda m, *a: m.logps,
        ref_model=SimpleNamespace(logps=ref),
        processing_class=SimpleNamespace(batch_decode=lambda ids, skip_special_tokens: ["x"] * len(ids)),
        _calculate_rewards_from_functions=lambda **kw: rewards,
        reward_funcs=[None],
        stats=defaultdict(list),
        accelerator=accelerator,
        beta=beta,
        state=SimpleNamespace(global_step=0),
    )
    OnlineDPOTrainer.training_step(trainer, model, {"prompt": ["p"] * (mask.size(0) // 2)})
    return captured[0], trainer.stats


def test_online_dpo_matches_trl_online_dpo():
    """TRL picks chosen = the higher-reward of each prompt's 2 samples (ties: the first); we are given that pair."""
    g = torch.Generator().manual_seed(10)
    n, t = 4, 5
    mask = (torch.arange(t)[None, :] < torch.randint(1, t + 1, (2 * n,), generator=g)[:, None]).double()
    policy = (-torch.rand(2 * n, t, dtype=torch.float64, generator=g) * 3 * mask).requires_grad_(True)
    ref = (policy.detach() + 0.3 * torch.randn(2 * n, t, dtype=torch.float64, generator=g)) * mask
    rewards = torch.tensor([1.0, 0.0, 2.0, 1.0, 0.0, 1.0, 2.0, 0.5], dtype=torch.float64)
    trl_loss, stats = trl_online_dpo(policy, ref, mask, rewards, beta=0.1)

    first_wins = rewards[:n] >= rewards[n:]
    chosen = torch.where(first_wins, torch.arange(n), torch.arange(n) + n)
    rejected = torch.where(first_wins, torch.arange(n) + n, torch.arange(n))
    seq, ref_seq = (policy * mask).sum(1), (ref * mask).sum(1)
    pairs = LossInputs(
        chosen_logps=seq[chosen],
        rejected_logps=seq[rejected],
        ref_chosen_logps=ref_seq[chosen],
        ref_rejected_logps=ref_seq[rejected],
        chosen_rewards=rewards[chosen],
        rejected_rewards=rewards[rejected],
    )
    ours = losses.get("online_dpo")(pairs)
    assert_close(ours.metrics["rewards/margin"], stats["rewards/margins"][-1])
    assert_close(ours.metrics["scores/margin"], stats["objective/scores_margin"][-1])
    _check(ours, trl_loss, policy)
