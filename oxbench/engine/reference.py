"""Reference log-probs: computed once per dataset, cached by content hash, never per step.

Offline methods with a fixed reference read per-example response-token log-probs from
:class:`RefCache`. Methods whose reference moves (``updates_reference``), that need full
reference logits (``needs_full_logits``) or that train on freshly generated data use a
:class:`LiveReference`: a frozen copy of the initial policy, refreshed only when the spec
says so.
"""

from __future__ import annotations

import copy
import os
import secrets
from pathlib import Path

import torch

import oxbench.device as placement
from losses.reference import mix_reference_
from oxbench.text.batching import collate, token_logps
from oxbench.utils import cache_hit, cache_root, content_hash, seal

REF_CACHE_VERSION = 1


def response_logps_rows(logp: torch.Tensor, mask: torch.Tensor) -> list[list[float]]:
    """(B, T) log-probs + mask -> per-row list of the response-token values, in order."""
    return [logp[i][mask[i] > 0].tolist() for i in range(logp.shape[0])]


def scatter_rows(rows: list[list[float]], mask: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`response_logps_rows` onto a (B, T) grid shaped like ``mask``."""
    out = torch.zeros_like(mask, dtype=torch.float32)
    for i, vals in enumerate(rows):
        pos = torch.nonzero(mask[i] > 0).squeeze(-1)
        if len(vals) != pos.numel():
            raise RuntimeError(f"reference cache row {i} has {len(vals)} tokens, batch has {pos.numel()}")
        out[i, pos] = torch.tensor(vals, dtype=torch.float32, device=mask.device)
    return out


class RefCache:
    """``{example_id: {role: [token logps]}}`` computed with the initial policy."""

    def __init__(self, table: dict[str, dict[str, list[float]]], key: str):
        self.table, self.key = table, key

    @classmethod
    @torch.no_grad()
    def build(
        cls,
        model,
        examples: list[dict],
        roles: tuple[str, ...],
        pad_id: int,
        *,
        key_parts: dict,
        batch_size: int = 32,
    ) -> RefCache:
        key = content_hash(
            {
                "v": REF_CACHE_VERSION,
                "roles": roles,
                "ids": [e["id"] for e in examples],
                "seqs": content_hash([[e[r] for r in roles] for e in examples]),
                **key_parts,
            }
        )
        path = Path(cache_root()) / "ref" / f"ref-{key}.pt"
        if cache_hit(path):  # sealed when made: a cache file is checked data, never code
            return cls(torch.load(path, weights_only=True), key)
        was_training = model.training
        model.eval()
        table: dict[str, dict[str, list[float]]] = {e["id"]: {} for e in examples}
        for role in roles:
            for start in range(0, len(examples), batch_size):
                chunk = examples[start : start + batch_size]
                batch = collate([e[role] for e in chunk], pad_id)
                logp, mask = token_logps(model, batch)
                for e, row in zip(chunk, response_logps_rows(logp, mask)):
                    table[e["id"]][role] = row
        model.train(was_training)
        _save_atomic(table, path)
        return cls(table, key)

    def sequence_and_tokens(self, ids: list[str], role: str, mask: torch.Tensor):
        tok = scatter_rows([self.table[i][role] for i in ids], mask)
        return tok.sum(-1), tok


def _save_atomic(obj, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.{secrets.token_hex(4)}.tmp")
    torch.save(obj, tmp)
    seal(tmp, into=path)  # before it is in place: no reader meets it unsealed
    tmp.replace(path)


class LiveReference:
    """A frozen copy of the policy, with a hard or soft (TR-DPO) refresh."""

    def __init__(self, model):
        self.model = placement.place(copy.deepcopy(model).eval())
        for p in self.model.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def refresh(self, state_dict: dict[str, torch.Tensor], alpha: float = 1.0) -> None:
        """``ref <- alpha * policy + (1 - alpha) * ref`` (alpha = 1: a hard copy), with the update
        the TRL parity tests check (:func:`losses.reference.mix_reference_`)."""
        own = self.model.state_dict()
        keys = [k for k in state_dict if k in own]
        mix_reference_([state_dict[k].to(own[k]) for k in keys], [own[k] for k in keys], alpha)

    @torch.no_grad()
    def logps(self, batch, *, return_logits: bool = False, share_prompt: bool = False):
        return token_logps(self.model, batch, return_logits=return_logits, share_prompt=share_prompt)
