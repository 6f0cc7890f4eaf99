"""Rollouts for online methods: a generation copy of the policy that knows its version.

The :class:`RolloutWorker` holds its own copy of the policy weights (as a vLLM server
would) and generates with the KV cache. ``pull`` copies the trainer's current weights in (in
place, device to device; ``sync`` loads a snapshot, in place too; with the vLLM backend the copy then
goes on to the server without a file: :mod:`oxbench.engine.weight_stream`) and stamps them with the
policy version; every :class:`Rollout` records the version that produced it. Each sync's time, bytes
and path reach the metrics (:meth:`RolloutWorker.take_sync_stats`). Synchronising every step gives
on-policy RL; synchronising less often gives rollouts from stale policies (asynchronous RL), with the
staleness visible to the loss.

A rollout keeps the token ids exactly as sampled and the behaviour log-probs captured in the
generation pass; the trainer trains on those ids and never re-tokenises the decoded text (with
byte-level BPE, decode -> encode gives other tokens than the ones sampled).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import torch

import oxbench.device as placement
from oxbench.engine import model as M
from oxbench.tasks.rewards import FILE_ROW, TrainerState, scored_group
from oxbench.text.batching import collate
from oxbench.text.formatting import format_prompt
from oxbench.text.generation import Sample, cut_at_eos, sample

IN_PLACE = "in-place copy"  # the rollout copy's sync path (take_sync_stats)
LOGITS_BUDGET = 4 * 2**30  # bytes of per-step fp32 logits one generation batch may hold (output_logits)


@dataclass
class Rollout:
    prompt_id: str
    question: str
    answer: str  # gold answer field, for the grader
    completion: str  # decoded text (special tokens skipped), for the grader and pair methods' logs
    reward: float
    group: int  # rollouts of the same prompt share a group
    policy_version: int
    finished: bool = True  # ended with end-of-sequence (else truncated at max_new_tokens)
    prompt_ids: list[int] = field(default_factory=list)  # as fed to the sampler, no padding
    completion_ids: list[int] = field(default_factory=list)  # as sampled, with the EOS if finished
    # per completion token: log-prob at temperature 1 under the weights that sampled (old_token_logps)
    behaviour_logps: list[float] = field(default_factory=list)
    # online.rewards: this completion's reward from each function ({name: value, None: no reward})
    reward_parts: dict[str, float | None] | None = None

    def sequence(self, max_len: int) -> tuple[list[int], int]:
        """``(prompt + completion ids, prompt length)``, truncated to ``max_len``: :func:`collate`'s input."""
        return (self.prompt_ids + self.completion_ids)[:max_len], len(self.prompt_ids)


def collate_rollouts(rollouts: list[Rollout], pad_id: int, max_len: int) -> tuple[dict, torch.Tensor]:
    """The training batch built from the sampled ids, and ``old_token_logps`` (B, T-1) in its layout.

    ``token_logps[:, t]`` scores ``input_ids[:, t+1]``, so completion token ``j`` (at position
    ``prompt_len + j``) has its behaviour log-prob at column ``prompt_len + j - 1``: exactly where
    ``response_mask[:, 1:]`` is 1. Zero elsewhere, like the policy's token log-probs.
    """
    seqs = [r.sequence(max_len) for r in rollouts]
    batch = collate(seqs, pad_id)
    cols = batch["input_ids"].shape[1] - 1
    rows = []
    for (ids, plen), r in zip(seqs, rollouts):
        row, k = [0.0] * cols, len(ids) - plen
        if k > 0:
            row[plen - 1 : plen - 1 + k] = r.behaviour_logps[:k]
        rows.append(row)
    return batch, torch.tensor(rows, dtype=torch.float32, device=batch["input_ids"].device)


def vllm_options(online) -> dict:
    """The vLLM server's placement keywords (:class:`~oxbench.engine.vllm_client.VllmEngine`) from ``online``."""
    return {"placement": online.vllm_placement, "devices": online.vllm_devices, "memory": online.vllm_memory}


class RolloutWorker:
    """The rollout copy of the policy. ``vllm``: the vLLM server's placement (``placement``, ``devices``,
    ``memory``: :class:`~oxbench.engine.vllm_client.VllmEngine`'s keywords) for backend ``vllm``."""

    def __init__(
        self,
        model,
        tokenizer,
        *,
        max_len: int,
        backend: str = "hf",
        vllm: dict | None = None,
        prompt=format_prompt,
    ):
        self.source = model  # the live policy LM the learner trains, which :meth:`pull` copies from
        self.model, self.backend = placement.place(copy.deepcopy(model).eval()), backend
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.tokenizer, self.max_len, self.version = tokenizer, max_len, -1
        self.prompt = prompt  # the task's prompt format: prompt(tokenizer, question) -> text
        # weight syncs since take_sync_stats: time (the gather, the copy in, and to a vLLM server) and
        # the bytes copied into this copy
        self.sync_seconds, self.sync_bytes = 0.0, 0
        self.vllm = None
        if backend == "vllm":
            from oxbench.engine.vllm_client import VllmEngine

            self.vllm = VllmEngine(self.model, tokenizer, threads=torch.get_num_threads(), **(vllm or {}))

    @torch.no_grad()
    def pull(self, version: int) -> None:
        """Take the learner's weights now, as ``version``: gathered (ZeRO-3) and copied in place into this
        copy's parameters (device to device, no host round trip), then to a vLLM server. All of it, the
        gather included, counts as sync time."""
        start = time.perf_counter()
        self.sync_bytes += M.copy_weights(self.source, self.model)
        self._loaded(version, start)

    @torch.no_grad()
    def sync(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Load a snapshot (``state_dict``, e.g. a delayed source's or a checkpoint's) as ``version``: in
        place too (``load_state_dict`` copies into the parameters)."""
        start = time.perf_counter()
        own = self.model.state_dict()
        self.model.load_state_dict(state_dict, strict=False)
        self.sync_bytes += sum(own[k].numel() * own[k].element_size() for k in state_dict if k in own)
        self._loaded(version, start)

    def _loaded(self, version: int, start: float) -> None:
        if self.vllm is not None:
            self.vllm.sync(self.model.state_dict())
        self.version = version
        self.sync_seconds += time.perf_counter() - start

    def snapshot(self, weights) -> dict[str, torch.Tensor]:
        """``weights()`` (the learner's full weights, host copies: a gather under ZeRO-3), its time counted
        as sync time (a delayed source gathers a snapshot at one step and loads it at a later one)."""
        start = time.perf_counter()
        state = weights()
        self.sync_seconds += time.perf_counter() - start
        return state

    def take_sync_stats(self) -> dict[str, float | int | str | None]:
        """The weight syncs since the last call, for a metrics row: ``sync_s`` (the whole sync: the learner's
        weights gathered, copied into this copy and, with the vLLM backend, sent to the server),
        ``sync_bytes`` (copied into this copy) and ``sync_path`` (how: ``in-place copy``, into the
        parameters where they are); with the vLLM backend the server's part of them: ``vllm_sync_s``
        (the weights sent and reloaded), ``vllm_sync_bytes`` (that travelled) and ``vllm_sync_path``
        (``cuda-ipc``, ``socket`` or ``file``: :mod:`oxbench.engine.weight_stream`)."""
        out: dict = {"sync_s": self.sync_seconds, "sync_bytes": self.sync_bytes, "sync_path": IN_PLACE}
        if self.vllm is not None:
            v = self.vllm
            out |= {
                "vllm_sync_s": v.sync_seconds,
                "vllm_sync_bytes": v.sync_bytes,
                "vllm_sync_path": v.sync_path,
            }
            v.sync_seconds, v.sync_bytes = 0.0, 0
        self.sync_seconds, self.sync_bytes = 0.0, 0
        return out

    def close(self) -> None:
        if self.vllm is not None:
            self.vllm.close()
            self.vllm = None

    def _sample(self, prompts: list[str], n: int, temperature: float, max_new_tokens: int, seed: int):
        """Per prompt, its ``n`` :class:`Sample` from the configured backend."""
        if self.vllm is None:
            return sample(
                self.model,
                self.tokenizer,
                prompts,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                num_return_sequences=n,
                batch_size=self._batch_prompts(n, max_new_tokens),
                generator_seed=seed,
                backend=self.backend,
            )
        ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        groups = self.vllm.sample(ids, n=n, temperature=temperature, max_tokens=max_new_tokens, seed=seed)
        eos = self.tokenizer.eos_token_id
        return [
            [Sample(p, c, lp[: len(c)], done) for c, lp in out for c, done in [cut_at_eos(c, eos)]]
            for p, out in zip(ids, groups)
        ]

    def _batch_prompts(self, n: int, max_new_tokens: int) -> int:
        """Prompts per generation batch: 256 sequences, fewer if their per-step logits would pass the budget."""
        per_prompt = n * max_new_tokens * self.model.config.vocab_size * 4
        return max(1, min(256 // n, LOGITS_BUDGET // per_prompt))

    def rollouts(
        self,
        rows: list[dict],
        *,
        n: int,
        temperature: float,
        max_new_tokens: int,
        seed: int,
        reward_fn,
        group_offset: int = 0,
    ) -> list[Rollout]:
        """``n`` samples per row, each with its ids, behaviour log-probs, text and reward. A task's row is
        prompted in the task's format; a data file's (``data.path``) with its rendered ``prompt``."""
        prompts = [r["prompt"] if FILE_ROW in r else self.prompt(self.tokenizer, r["question"]) for r in rows]
        samples = self._sample(prompts, n, temperature, max_new_tokens, seed)
        result, state = [], TrainerState(global_step=max(self.version, 0))  # one policy samples them all
        for g, (r, group) in enumerate(zip(rows, samples)):
            texts = [self.tokenizer.decode(s.completion_ids, skip_special_tokens=True) for s in group]
            ids = [s.completion_ids for s in group]
            rewards, parts = scored_group(reward_fn, texts, r, ids=ids, state=state)
            for i, (s, text, reward) in enumerate(zip(group, texts, rewards)):
                result.append(
                    Rollout(
                        r["id"],
                        r["question"],
                        r["answer"],
                        text,
                        reward,
                        group_offset + g,
                        self.version,
                        s.finished,
                        s.prompt_ids,
                        s.completion_ids,
                        s.logps,
                        None if parts is None else parts[i],
                    )
                )
        return result
