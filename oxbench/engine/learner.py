"""The learner: one optimiser step on a batch, whatever produced it (:meth:`Learner.step`).

A source (:mod:`oxbench.engine.sources`) hands the loop a :class:`~oxbench.engine.sources.Batch`; the
loop calls :meth:`Learner.step` once per pass over it. On a dataset's batch (offline methods) the
learner runs the loss on each of its micro-batches with the reference's cached log-probs (or a live
reference's), and steps at the end. On a rollout batch (online methods) it

* splits the batch into micro-batches of ``train.batch_size`` prompts, each with all its rollouts
  (so group statistics never straddle two micro-batches);
* computes, once per batch and before any update (:meth:`Learner.prepare`), what does not depend on
  the parameters being trained: the reference's log-probs, the value head's ``old_values``, and, when
  the batch is split over more than one micro-batch or rank, the spec's whole-batch statistics
  (``batch_stats``: token counts, whitening mean/std) over every rollout of every rank. So
  accumulation and ranks give the loss of the whole batch, and an unsplit batch gives exactly what it
  gave before;
* runs the loss on each micro-batch (sampled token ids, behaviour log-probs from the generation
  pass, no re-tokenising) and steps the optimiser at the end.

Either way each micro-batch goes through the one :meth:`Learner.micro_step` (loss, finite check,
backward, and at the last one the gradient norm and DeepSpeed's optimiser step). The learner carries
the loss's state (:class:`LossState`) and, after the step, moves a reference that the spec updates
(``reference_update``: TR-DPO).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

import oxbench.device as placement
from losses import LossInputs, LossSpec
from oxbench.engine import diagnostics as diag
from oxbench.engine import distributed as D
from oxbench.engine.batches import build_offline_inputs
from oxbench.engine.model import policy_weights
from oxbench.engine.plan import Capabilities
from oxbench.engine.rollout import Rollout, collate_rollouts
from oxbench.text.batching import encode_pair, forward, logps_from_output
from oxbench.text.formatting import format_completion, format_prompt


class NonFiniteLoss(RuntimeError):
    """The loss was NaN or infinite: the run is recorded as failed with this message."""


def check_finite(out, run: str, step: int) -> None:
    if not torch.isfinite(out.loss).all():
        raise NonFiniteLoss(f"run {run}: non-finite loss ({out.loss.item()}) at step {step}")


def grad_norm(engine) -> float | None:
    """The pre-clipping global gradient norm, read just before ``engine.step()`` at a boundary.

    DeepSpeed reports it on its ZeRO paths but returns ``None`` on the fp32 ZeRO-0 path, so there it
    is computed from the gradients (already averaged over ranks and accumulation steps)."""
    if engine.zero_optimization_stage() != 0:
        return None
    sq = sum(p.grad.detach().float().pow(2).sum() for p in engine.module.parameters() if p.grad is not None)
    return float(sq) ** 0.5


def _pad_cat(ts: list[torch.Tensor | None]) -> torch.Tensor | None:
    """Rows of (B_i, T_i) tensors stacked into one (ΣB_i, max T_i), zero-padded on the right."""
    if ts[0] is None:
        return None
    cols = max(t.size(1) for t in ts)
    return torch.cat([torch.nn.functional.pad(t.float(), (0, cols - t.size(1))) for t in ts])


def _scalar(v: float) -> torch.Tensor:
    return torch.tensor(float(v), device=placement.get())


class LossState:
    """The state a loss carries across optimiser steps (``LossSpec.initial_state``).

    Every micro-batch of a step sees the state left by the previous step; each may propose an updated
    state (``LossOutput.state``), and :meth:`commit` averages the proposals over the micro-batches
    and the ranks, so every rank carries the same state. ``value`` is None for a stateless loss.
    """

    def __init__(self, spec: LossSpec):
        init = spec.initial_state
        self.value = {k: _scalar(v) for k, v in init.items()} if init else None
        self._proposals: list[dict] = []

    def offer(self, state: dict | None) -> None:
        if self.value is not None and state is not None:
            self._proposals.append({k: float(v) for k, v in state.items()})

    def commit(self) -> None:
        if self.value is None:
            return
        proposals = [p for rank in D.all_gather_objects(self._proposals) for p in rank]
        if proposals:
            self.value = {k: _scalar(sum(p[k] for p in proposals) / len(proposals)) for k in self.value}
        self._proposals = []

    def as_dict(self) -> dict[str, float] | None:
        return None if self.value is None else {k: float(v) for k, v in self.value.items()}


@dataclass
class Prepared:
    """A rollout batch ready for :meth:`Learner.update`: its micro-batches and what stays fixed."""

    parts: list[list[Rollout]]
    batches: list[tuple[dict, torch.Tensor]] = field(default_factory=list)  # (collated, behaviour logps)
    ref: list[torch.Tensor | None] = field(default_factory=list)
    old_values: list[torch.Tensor | None] = field(default_factory=list)
    stats: dict[str, torch.Tensor] | None = None
    version: int = 0
    prox: dict[int, torch.Tensor] = field(default_factory=dict)  # first-pass log-probs per micro-batch


@dataclass
class Learner:
    spec: LossSpec
    hparams: dict
    engine: object
    tokenizer: object
    live_ref: object | None
    max_len: int
    max_new_tokens: int
    micro_batches: int  # per rank
    run: str
    state: LossState = None
    diagnostic_is_cap: float = 2.0  # the diagnostics count a token above this importance weight as truncated
    ess_lr: str = "none"  # VCPO's ESS-scaled learning rate: none, sqrt or linear in min(1, ESS / ess_lr_base)
    ess_lr_base: float = 1.0
    share_prompt: bool = False  # forward each prompt once and its completions on its KV cache
    check_reference: bool = (
        True  # offline: at step 0 the policy's log-probs must equal the cached reference's
    )
    diagnostics: dict = field(default_factory=dict)  # the last update's batch diagnostics
    _prev_grad: torch.Tensor | None = None  # the last step's gradient sketch (diagnostics.grad_sketch)
    caps: Capabilities | None = None  # the run plan's (None: derived from the spec, as the plan does)
    prompt: Callable = format_prompt  # the task's prompt format (a gold chosen answer's prompt)

    def __post_init__(self):
        self.state = self.state or LossState(self.spec)
        self.caps = self.caps or Capabilities.of(self.spec, self.hparams)

    def state_dict(self) -> dict:
        """What the learner carries across optimiser steps, for a checkpoint: the loss's state, the
        last step's gradient sketch (for the next step's gradient cosine; at most ``diagnostics.SKETCH``
        floats) and a live reference's weights."""
        ref = None if self.live_ref is None else self.live_ref.model.state_dict()
        return {"loss_state": self.state.value, "prev_grad": self._prev_grad, "live_ref": ref}

    def load_state_dict(self, saved: dict) -> None:
        """A checkpoint written before the sketch holds the whole last gradient: sketched on load (the
        sketch is by position, so it equals the one that gradient would have had), exact when small."""
        prev = saved["prev_grad"]
        self.state.value = saved["loss_state"]
        self._prev_grad = None if prev is None else diag.grad_sketch([prev])
        if self.live_ref is not None:
            self.live_ref.model.load_state_dict(saved["live_ref"])

    # -------------------------------------------------------------------------------- step

    def step(self, batch, version: int, progress: float) -> tuple[list[dict], float | None]:
        """One optimiser step on ``batch`` (a :class:`~oxbench.engine.sources.Batch`) for a learner at
        ``version``, ``progress`` the share of the run's steps done. Returns the micro-batches' metrics
        and the gradient norm before clipping. A rollout batch is prepared on its first pass."""
        if batch.examples is not None:
            out = self._step_examples(batch, version, progress)
        else:
            if batch.prepared is None:
                batch.prepared = self.prepare(batch.rollouts, version)
            out = self.update(batch.prepared, version, progress)
        self._update_reference(version + 1)
        return out

    def _step_examples(self, batch, version: int, progress: float) -> tuple[list[dict], float | None]:
        """A dataset batch: its micro-batches' losses, each backward, and DeepSpeed's step (an optimiser
        step at the last, the accumulation boundary)."""
        metrics, norm = [], None
        for i, chunk in enumerate(batch.examples):
            inputs = build_offline_inputs(
                self.caps.data,
                self.engine,
                chunk,
                self.tokenizer.pad_token_id,
                ref_cache=batch.reference,
                live_ref=self.live_ref,
                needs_full_logits=self.caps.full_logits,
                kl_pairs=self.caps.kl_pairs,
            )
            if version == i == 0 and batch.reference is not None and self.check_reference:
                check_reference_equal(inputs, self.caps.data, self.run)
            last = self.engine.is_gradient_accumulation_boundary()
            out, at_last = self.micro_step(inputs, version, progress, last=last)
            norm = at_last if last else norm
            metrics.append({"loss": out.loss.item(), **out.metrics})
        self.state.commit()
        return metrics, norm

    def micro_step(
        self, inputs, version: int, progress: float, *, last: bool, tied: bool = False, at_boundary=None
    ):
        """The one micro-step of every batch (examples, rollouts, self-sampled pairs): the loss on
        ``inputs``, checked finite, backward (times 0 for a ``tied`` pair batch with nothing to learn:
        DeepSpeed still needs the call), and DeepSpeed's step, an optimiser step at the ``last``
        micro-batch. There, first, the gradient norm before clipping and ``at_boundary()`` (a learning
        rate scaled for this step: put back after it). Returns the loss output and the norm (None but
        at the last)."""
        inputs.progress, inputs.state = progress, self.state.value
        out = self.spec.fn(inputs, **self.hparams)
        check_finite(out, self.run, version)
        self.engine.backward(out.loss * 0.0 if tied else out.loss)
        norm = scaled = None
        if last:
            norm = grad_norm(self.engine)
            scaled = at_boundary() if at_boundary is not None else None
        self.engine.step()
        if scaled is not None:
            self._restore_lr(*scaled)
        if not tied:
            self.state.offer(out.state)
        return out, norm

    def _update_reference(self, version: int) -> None:
        """Apply the spec's ``reference_update`` after optimiser step ``version`` (TR-DPO), if it asks."""
        if self.live_ref is None or self.spec.reference_update is None:
            return
        alpha = self.spec.reference_update(version, **self.hparams)
        if alpha is not None:
            self.live_ref.refresh(policy_weights(self.engine), alpha)

    @property
    def split(self) -> bool:
        return self.micro_batches * D.world_size() > 1

    # ----------------------------------------------------------------------------- prepare

    @torch.no_grad()
    def prepare(self, experience: list[Rollout], version: int) -> Prepared:
        size = len(experience) // self.micro_batches
        parts = [experience[m * size : (m + 1) * size] for m in range(self.micro_batches)]
        prep = Prepared(parts, version=version)
        if self.caps.own_pairs:
            return prep
        pad = self.tokenizer.pad_token_id
        for part in parts:
            batch, old = collate_rollouts(part, pad, self.max_len)
            prep.batches.append((batch, old))
            ref = self.live_ref
            prep.ref.append(ref.logps(batch, share_prompt=self.share_prompt)[0] if ref is not None else None)
            prep.old_values.append(self._values(batch) if self.caps.value_model else None)
        if self.split:
            prep.stats = self._batch_stats(prep)
        return prep

    def _values(self, batch) -> torch.Tensor:
        out = forward(self.engine, batch)  # the value head's model: never the shared-prompt forward
        _, mask = logps_from_output(out, batch)
        return (out["value"][:, :-1] * mask).detach()

    def _batch_stats(self, prep: Prepared) -> dict[str, torch.Tensor]:
        """``tokens`` plus the spec's ``batch_stats`` over every rollout of every rank: the micro-batches
        of all ranks as one no-gradient LossInputs, zero-padded on the right."""
        local = {
            "old": [old for _, old in prep.batches],
            "mask": [batch["response_mask"][:, 1:].to(old.dtype) for batch, old in prep.batches],
            "ref": prep.ref,
            "values": prep.old_values,
            "rows": [(r.reward, r.group, r.policy_version) for part in prep.parts for r in part],
        }
        ranks = D.all_gather_objects(local)

        def merged(key):
            return _pad_cat([t for rank in ranks for t in rank[key]])

        old, values = merged("old"), merged("values")
        rewards, groups, versions = zip(*[row for rank in ranks for row in rank["rows"]], strict=True)
        batch = LossInputs(
            token_logps=old,
            old_token_logps=old,
            mask=merged("mask"),
            **_row_tensors(rewards, groups, versions, old.device),
            current_version=prep.version,
            max_completion_length=self.max_new_tokens,
            ref_token_logps=merged("ref"),
            values=values,
            old_values=values,
        )
        stats = {"tokens": batch.mask.sum()}
        if self.spec.batch_stats is not None:
            stats.update(self.spec.batch_stats(batch, **self.hparams))
        return stats

    # ------------------------------------------------------------------------------ update

    def update(self, prep: Prepared, version: int, progress: float) -> tuple[list[dict], float | None]:
        """One optimiser step over the prepared batch. Returns the micro-batches' metrics and the
        gradient norm (before clipping)."""
        metrics, norm, sums = [], None, []

        def at_boundary():
            self.diagnostics = self._diagnose(sums, prep, version)
            return self._scale_lr()

        for m in range(self.micro_batches):
            inputs, extra, tied = self._inputs(prep, m, version)
            if not self.caps.own_pairs:
                # π_old/μ on every pass, as VCPO: the weights consuming the batch (its first pass) vs behaviour
                prox = inputs.prox_token_logps if inputs.prox_token_logps is not None else inputs.token_logps
                sums.append(
                    diag.weight_sums(prox, inputs.old_token_logps, inputs.mask, self.diagnostic_is_cap)
                )
            last = m == self.micro_batches - 1
            out, at_last = self.micro_step(
                inputs, version, progress, last=last, tied=tied, at_boundary=at_boundary
            )
            norm = at_last if last else norm
            metrics.append(extra if tied else {"loss": out.loss.item(), **out.metrics, **extra})
        self.state.commit()
        return metrics, norm

    def _scale_lr(self) -> tuple[list[float], list[float]] | None:
        """VCPO (arXiv 2602.17616; mit-han-lab/vcpo ``_optimizer_step_with_buffer``): this step's LR times
        ``min(1, ESS / ess_lr_base)`` (``linear``) or its square root (``sqrt``, VCPO's default), no lower
        bound. Returns the LRs before and after, for :meth:`_restore_lr`; the effective LR is logged."""
        groups = self.engine.optimizer.param_groups
        self.diagnostics["lr_effective"] = groups[0]["lr"]
        if self.ess_lr == "none" or "ess" not in self.diagnostics:
            return None
        scale = min(1.0, self.diagnostics["ess"] / self.ess_lr_base)
        factor = math.sqrt(scale) if self.ess_lr == "sqrt" else scale
        before = [g["lr"] for g in groups]
        for g in groups:
            g["lr"] *= factor
        self.diagnostics["lr_effective"] = groups[0]["lr"]
        return before, [g["lr"] for g in groups]

    def _restore_lr(self, before: list[float], after: list[float]) -> None:
        """Undo the scaling, unless the scheduler has already set the next step's LR (LambdaLR
        recomputes it from its base, so the scaling never reaches the schedule)."""
        for g, b, a in zip(self.engine.optimizer.param_groups, before, after):
            if g["lr"] == a:
                g["lr"] = b

    def _diagnose(self, sums: list[dict], prep: Prepared, version: int) -> dict:
        """The batch's off-policy diagnostics (:mod:`oxbench.engine.diagnostics`), gathered over ranks,
        and the cosine of this step's gradient with the previous one's (ZeRO-0, where it is whole)."""
        if self.caps.own_pairs:
            return {}
        lags = [version - r.policy_version for part in prep.parts for r in part]
        ranks = D.all_gather_objects({"sums": sums, "lags": lags})
        out = diag.combine([s for r in ranks for s in r["sums"]])
        out["staleness_hist"] = diag.staleness_histogram([lag for r in ranks for lag in r["lags"]])
        if self.engine.zero_optimization_stage() == 0:  # bounded: no full copy of a large gradient
            sketch = diag.grad_sketch([p.grad for p in self.engine.module.parameters() if p.grad is not None])
            out["grad_cosine"] = diag.cosine(sketch, self._prev_grad)
            self._prev_grad = sketch
        return out

    def _inputs(self, prep: Prepared, m: int, version: int) -> tuple[LossInputs, dict, bool]:
        """(LossInputs, diagnostics, tied) for micro-batch ``m``."""
        if self.caps.own_pairs:
            inputs, tied = pair_inputs(
                self.spec,
                self.engine,
                self.live_ref,
                prep.parts[m],
                self.tokenizer,
                self.max_len,
                self.prompt,
            )
            return inputs, {"skipped_tied": float(tied)}, tied
        batch, old = prep.batches[m]
        out = forward(self.engine, batch, share_prompt=self.share_prompt)
        logp, mask, logits = logps_from_output(out, batch, return_logits=True)
        rows = [(r.reward, r.group, r.policy_version) for r in prep.parts[m]]
        inputs = LossInputs(
            token_logps=logp,
            mask=mask,
            logps=logp.sum(-1),
            old_token_logps=old,
            **_row_tensors(*zip(*rows, strict=True), logp.device),
            current_version=version,
            max_completion_length=self.max_new_tokens,
            ref_token_logps=prep.ref[m],
        )
        if self.split:
            inputs.micro_batches = self.micro_batches * D.world_size()
            inputs.batch_stats = prep.stats
        if version == prep.version:  # the first pass: the learner's weights now are the proximal policy
            prep.prox[m] = logp.detach()
        else:
            inputs.prox_token_logps = prep.prox[m]
        if self.spec.uses_entropy(self.hparams):
            logp_all = logits.float().log_softmax(-1)
            inputs.token_entropy = -(logp_all.exp() * logp_all).sum(-1) * mask
        if self.caps.value_model:
            inputs.values = out["value"][:, :-1] * mask
            inputs.old_values = prep.old_values[m]
        return inputs, {"entropy": token_entropy(logits, mask)}, False


def check_reference_equal(inputs: LossInputs, kind: str, run: str) -> None:
    """At step 0 the policy *is* the reference: their log-probs must agree."""
    pairs = {
        "pairs": [("chosen_logps", "ref_chosen_logps"), ("rejected_logps", "ref_rejected_logps")],
        "unpaired": [("logps", "ref_logps")],
    }.get(kind, [])
    for pol, ref in pairs:
        a, b = getattr(inputs, pol).detach(), getattr(inputs, ref)
        if not torch.allclose(a, b, atol=1e-3, rtol=1e-4):
            raise RuntimeError(
                f"run {run}: step-0 {pol} differ from cached {ref} "
                f"(max abs diff {(a - b).abs().max().item():.2e}); stale reference cache?"
            )


def _row_tensors(rewards, groups, versions, device) -> dict[str, torch.Tensor]:
    """LossInputs' per-rollout fields (rewards, group ids, policy versions) on ``device``."""
    return {
        "rewards": torch.tensor(rewards, dtype=torch.float32, device=device),
        "group_ids": torch.tensor(groups, dtype=torch.long, device=device),
        "policy_versions": torch.tensor(versions, dtype=torch.long, device=device),
    }


@torch.no_grad()
def token_entropy(logits: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean entropy (nats) of the policy's next-token distribution over the completion tokens."""
    logp = logits.float().log_softmax(-1)
    ent = -(logp.exp() * logp).sum(-1)
    return float((ent * mask).sum() / mask.sum().clamp(min=1))


def pair_examples(spec, part, tokenizer, max_len: int, prompt=format_prompt) -> list[dict]:
    """One pair example per group with a preference, in sampled ids: best vs worst sample
    (``self_play``; a group whose rewards all tie has none) or gold vs a wrong sample (``gold``, its prompt
    written by ``prompt``, the task's format)."""
    by_group: dict[int, list] = {}
    for r in part:
        by_group.setdefault(r.group, []).append(r)
    examples = []
    for g, rs in by_group.items():
        if spec.chosen_source == "gold":
            gold = format_completion(tokenizer, rs[0].answer)
            chosen = encode_pair(tokenizer, prompt(tokenizer, rs[0].question), gold, max_len)
            rejected = next((r for r in rs if not r.reward), rs[0]).sequence(max_len)
        else:
            best, worst = max(rs, key=lambda r: r.reward), min(rs, key=lambda r: r.reward)
            if best.reward == worst.reward:
                continue
            chosen, rejected = best.sequence(max_len), worst.sequence(max_len)
        examples.append({"id": f"{rs[0].prompt_id}/{g}", "chosen": chosen, "rejected": rejected})
    return examples


def pair_inputs(
    spec, engine, live_ref, part, tokenizer, max_len: int, prompt=format_prompt
) -> tuple[LossInputs, bool]:
    """(LossInputs, tied) for one micro-batch of a method that makes its own pairs.

    ``tied``: no group has a preference (every reward equal). The forward still runs, on one sample
    paired with itself, so that every rank makes the same collective calls, and the learner multiplies
    that loss by zero: the micro-batch adds no gradient (it still counts in DeepSpeed's average over
    micro-batches and ranks) and logs only ``skipped_tied: 1``. Skipping the optimizer step instead would
    need every micro-batch of every rank tied at once, or drop the pairs the others have.
    """
    examples = pair_examples(spec, part, tokenizer, max_len, prompt)
    tied = not examples
    if tied:
        seq = part[0].sequence(max_len)
        examples = [{"id": "tied", "chosen": seq, "rejected": seq}]
    return build_offline_inputs("pairs", engine, examples, tokenizer.pad_token_id, live_ref=live_ref), tied
