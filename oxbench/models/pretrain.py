"""``pretrain``: train a tiny model from scratch on gold solutions to make the "instruct" base.

Deterministic (fixed seeds, single data order) and cached by a content hash of its
config and :data:`PRETRAIN_VERSION`, so a grid pre-trains each scale once and every run
of that scale starts from byte-identical weights. Plain PyTorch: this is a set-up stage,
not an arm of the benchmark.

Reproducibility, measured: on one machine the weights are bitwise identical across processes
and across 1 and 2 CPU threads (tiny-xs, sha256 of all tensors). Across machines they are
not guaranteed: this session's 2-core AMD EPYC trained other bases from the same config and
package versions than an earlier session's machine did (base accuracy tiny-xs 7.7% vs 10.7%,
tiny-m 33.3% vs 26.7%). The cause is not established: the CPU kernels may differ between
machines, or the earlier bases came from an uncommitted code state (the quickstart records
say ``59c5eb3+dirty``). ``pretrain.json`` therefore
records the torch version, its CPU capability and the thread count, and every grid's arms
share one cached base, so comparisons within a grid are unaffected.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict

from oxbench.config import renamed
from oxbench.models.tiny import build_tiny
from oxbench.models.tokenizer import build_char_tokenizer
from oxbench.text.batching import collate, encode_pair, token_logps
from oxbench.text.formatting import format_completion
from oxbench.utils import (
    cache_hit,
    cache_root,
    content_hash,
    progress,
    publish_dir,
    seal,
    temp_dir_beside,
    warmup_cosine,
    write_json_atomic,
)

PRETRAIN_VERSION = 1


class PretrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    scale: str
    updates: int = renamed(600, "steps", "updates")
    batch_size: int = 32
    lr: float = 3e-3
    warmup: int = 30
    weight_decay: float = 0.01
    seed: int = 1234
    n_examples: int = 4000
    task: dict = {"name": "arith", "n_ops": 2, "max_operand": 30}
    answer_styles: dict[str, float] | None = None  # None: every solution ends "#### N"
    # fractions of the examples from other sources (the rest is ``task``): the general-domain families
    # of oxbench.tasks.general and ``hard`` (the task with HARD_EXTRA_OPS more operations); None: none
    mixture: dict[str, float] | None = None

    def key(self) -> str:
        # the style mix enters the key only when set, so gold-format bases keep their old keys
        fields = self.model_dump(by_alias=True)  # renamed settings keep their old names in the key
        fields["task"] = {("steps" if k == "n_ops" else k): v for k, v in fields["task"].items()}
        for optional in ("answer_styles", "mixture"):  # set only: older bases keep their keys
            if fields[optional] is None:
                del fields[optional]
        return content_hash({"version": PRETRAIN_VERSION, **fields})


def styled_rows(rows: list[dict], styles: dict[str, float] | None, seed: int) -> list[dict]:
    """Each row's answer restyled to a style drawn (seeded) from ``styles``; unchanged if ``None``."""
    if not styles:
        return rows
    from oxbench.tasks.arith import restyle

    rng = random.Random(f"styles/{seed}")
    names, weights = list(styles), list(styles.values())
    return [  # only the task's answers have a "#### N" line to restyle (a mixture's others do not)
        {**r, "answer": restyle(r["answer"], rng.choices(names, weights)[0])} if "#### " in r["answer"] else r
        for r in rows
    ]


def pretraining_rows(cfg: PretrainConfig) -> list[dict]:
    """The ``n_examples`` rows pre-training draws from: the task's (answers restyled), and each
    ``mixture`` source's share, shuffled together (seeded)."""
    from oxbench.tasks import hard_task, load_task_split
    from oxbench.tasks.general import pretraining_rows as general_rows

    shares = {name: round(cfg.n_examples * f) for name, f in (cfg.mixture or {}).items()}
    n_task = cfg.n_examples - sum(shares.values())
    rows = load_task_split(cfg.task, "train", n=n_task, seed=cfg.seed, distinct=False)
    for name, n in shares.items():
        if name == "hard":
            rows += load_task_split(hard_task(cfg.task), "train", n=n, seed=cfg.seed, distinct=False)
        else:
            rows += general_rows(name, n, seed=cfg.seed)
    rows = styled_rows(rows, cfg.answer_styles, cfg.seed)
    if cfg.mixture:
        random.Random(f"mixture/{cfg.seed}").shuffle(rows)
    return rows


def pretrain_dir(cfg: PretrainConfig) -> Path:
    return cache_root() / "pretrained" / f"{cfg.scale}-{cfg.key()}"


def ensure_pretrained(cfg: PretrainConfig, *, verbose: bool = True, use_shipped: bool = True) -> Path:
    """The directory of the pre-trained model (``save_pretrained`` format): the cache's; else the
    shipped base of its key (:mod:`oxbench.models.shipped`, checked by SHA-256); else trained here."""
    out = pretrain_dir(cfg)
    if cache_hit(out):  # sealed when made: weights altered in the cache are never used
        return out
    if use_shipped:
        from oxbench.models import shipped

        if shipped.install(cfg.key(), out):
            return out
    return _pretrain(cfg, out, verbose)


def _pretrain(cfg: PretrainConfig, out: Path, verbose: bool) -> Path:
    """Train the base of ``cfg`` from scratch into ``out`` (deterministic on one machine)."""

    tok = build_char_tokenizer()
    torch.manual_seed(cfg.seed)
    model = build_tiny(cfg.scale, len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    from oxbench.tasks import get_task

    rows, prompt = pretraining_rows(cfg), get_task(cfg.task["name"]).prompt
    seqs = [
        encode_pair(tok, prompt(tok, r["question"]), format_completion(tok, r["answer"]), 512) for r in rows
    ]
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, warmup_cosine(cfg.updates, cfg.warmup, peak_in_warmup=True)
    )
    order = random.Random(cfg.seed)
    start, losses = time.time(), []
    model.train()
    for _ in progress(range(cfg.updates), f"pretrain {cfg.scale}", enabled=verbose):
        batch = collate([seqs[order.randrange(len(seqs))] for _ in range(cfg.batch_size)], tok.pad_token_id)
        logp, mask = token_logps(model, batch)
        loss = -(logp.sum() / mask.sum())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    tmp = temp_dir_beside(out)  # its own: another process may pre-train the same base at once
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    info = {
        "config": cfg.model_dump(),
        "key": cfg.key(),
        "final_loss": sum(losses[-20:]) / 20,
        "seconds": round(time.time() - start, 1),
        "parameters": sum(p.numel() for p in model.parameters()),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }
    write_json_atomic(tmp / "pretrain.json", info)
    seal(tmp)  # before it is in place: no reader meets it unsealed
    publish_dir(tmp, out)  # another process finished first: keep theirs
    return out


def read_info(path: Path) -> dict:
    return json.loads((Path(path) / "pretrain.json").read_text())
