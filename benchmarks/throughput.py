"""Side-by-side throughput: oxbench vs TRL vs a bare PyTorch loop, paired and interleaved.

    python benchmarks/throughput.py generate --scales tiny-m tiny-l [--base tiny-m=DIR]
    python benchmarks/throughput.py online   --scales tiny-m tiny-l
    python benchmarks/throughput.py offline  --scales tiny-m tiny-l
    python benchmarks/throughput.py online   --device cuda --scales qwen2-0.5b --base qwen2-0.5b=DIR \
        --contenders oxbench-hf trl          # on a GPU, bf16 (scripts/gpu_smoke.sh)

Every contender runs the same model (built from config with one seed, or ``--base`` weights), the same
arith prompts and the same shapes: online B_p 8 x n 8 rollouts of at most 40 new tokens at T = 1, one
optimiser step per rollout batch; offline DPO on batches of 8 pairs. Torch threads are fixed
(``--threads``). Each *round* runs every contender once, in an order rotated from round to round;
a contender's time is the median of its steps after the first (warm-up). Ratios are taken inside a
round and then medianed over rounds, so machine noise that moves every contender alike cancels. The
machines this runs on are shared: quote the ratios, not the absolute times.

Contenders:
* ``generate``: one rollout batch through ``oxbench.text.generation.sample``, backend ``hf`` (HF
  ``generate``, what oxbench used before) against ``lean`` (oxbench's decode loop) and, when
  ``OXBENCH_VLLM_PYTHON`` names a Python with vLLM, the ``vllm`` backend's server.
* ``online``: oxbench's online loop (SGRPO) with each backend (and ``lean`` with
  ``online.share_prompt``: the learner's forward takes each prompt once; ``oxbench-defaults``: neither
  set, what a new config gets), TRL's GRPOTrainer, and a bare loop
  (HF ``generate`` + the GRPO loss + AdamW; the floor of a HF-generate trainer).
* ``offline``: oxbench's offline loop (DPO, reference log-probs cached), TRL's DPOTrainer
  (``precompute_ref_log_probs``), and a bare loop (one forward of chosen + rejected + AdamW).

``--device cuda`` runs every contender in bf16 on the GPU: oxbench's engine (DeepSpeed, bf16), TRL with
``bf16`` and, where vllm is importable, ``use_vllm`` in its colocate mode (else HF generate, said in the
JSON's ``trl``). ``--contenders`` keeps only the named ones (the reference is always kept).

Writes ``--out`` (JSON: every time, every ratio, the machine) and prints a table of ratios.

TRL is not one of oxbench's requirements: ``pip install -e ".[bench]"`` (or ``.[test]``) brings it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

B_P, N, NEW_TOKENS, DPO_BATCH = 8, 8, 40, 8
DEVICE = "cpu"  # --device: cuda runs every contender in bf16 on the GPU


def on_gpu() -> bool:
    return DEVICE == "cuda"


def trl_uses_vllm() -> bool:
    import importlib.util

    return on_gpu() and importlib.util.find_spec("vllm") is not None


TASK = {"name": "arith", "n_ops": 2, "max_operand": 40}


# --------------------------------------------------------------------------- shared set-up


def load_model(scale: str, base: str | None):
    """``(model, tokenizer)``: the saved base at ``base``, or the ``scale`` rung with seeded random weights."""
    from transformers import AutoModelForCausalLM

    from oxbench.models.tiny import build_tiny
    from oxbench.models.tokenizer import build_char_tokenizer

    dtype = torch.bfloat16 if on_gpu() else torch.float32
    if base:
        from oxbench.models.loading import load_tokenizer

        return AutoModelForCausalLM.from_pretrained(base, dtype=dtype), load_tokenizer(base)
    tok = build_char_tokenizer()
    torch.manual_seed(0)
    model = build_tiny(scale, len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    return model.to(dtype), tok


def problems(n: int) -> list[dict]:
    from oxbench.tasks import load_task_split

    return load_task_split(TASK, "train", n=n, seed=0)


def trl_clock():
    """``(stamps, callback)``: a TRL trainer callback that stamps the start of the first step and the end
    of every step, for :func:`step_times`."""
    from transformers import TrainerCallback

    stamps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *a, **k):
            stamps.append(time.perf_counter()) if not stamps else None

        def on_step_end(self, *a, **k):
            stamps.append(time.perf_counter())

    return stamps, Clock()


def step_times(stamps: list[float]) -> list[float]:
    """Per-step durations from cumulative time stamps, the first (warm-up) step dropped."""
    return [b - a for a, b in zip(stamps[:-1], stamps[1:])][1:] if len(stamps) > 2 else []


# --------------------------------------------------------------------------- generation


def gen_contender(backend: str):
    from oxbench.text.formatting import format_prompt
    from oxbench.text.generation import sample

    def run(model, tok, steps: int) -> list[float]:
        prompts = [format_prompt(tok, r["question"]) for r in problems(B_P)]
        times = []
        for i in range(steps + 1):
            t = time.perf_counter()
            sample(model, tok, prompts, max_new_tokens=NEW_TOKENS, temperature=1.0, num_return_sequences=N,
                   batch_size=B_P, generator_seed=i, backend=backend)  # fmt: skip
            times.append(time.perf_counter() - t)
        return times[1:]

    return run


def vllm_gen(model, tok, steps: int) -> list[float]:
    """The same batch through the ``vllm`` backend's server (OXBENCH_VLLM_PYTHON), weights already loaded."""
    from oxbench.engine.vllm_client import VllmEngine
    from oxbench.text.formatting import format_prompt

    engine = VllmEngine(model, tok, threads=torch.get_num_threads())
    ids = [
        tok(format_prompt(tok, r["question"]), add_special_tokens=False)["input_ids"] for r in problems(B_P)
    ]
    times = []
    try:
        for i in range(steps + 1):
            t = time.perf_counter()
            engine.sample(ids, n=N, temperature=1.0, max_tokens=NEW_TOKENS, seed=i)
            times.append(time.perf_counter() - t)
    finally:
        engine.close()
    return times[1:]


# --------------------------------------------------------------------------- online


def oxbench_online(backend: str | None, share_prompt: bool = False):
    """oxbench's online loop with ``backend`` and ``share_prompt``; ``backend=None``: the defaults a
    new config gets (neither setting written)."""

    def run(model, tok, steps: int) -> list[float]:
        import losses
        from oxbench.config import RunConfig
        from oxbench.engine import build as tr
        from oxbench.engine import distributed as D
        from oxbench.engine.plan import plan_of

        D.init_distributed()
        cfg = RunConfig(
            method="sgrpo",
            train={"batch_size": B_P, "lr": 1e-6, "warmup_ratio": 0.0, "check_reference": False},
            online={
                "n": N,
                "prompts_per_batch": B_P,
                "rounds": steps + 1,
                "max_new_tokens": NEW_TOKENS,
                **({} if backend is None else {"backend": backend, "share_prompt": share_prompt}),
            },  # fmt: skip
            data={"max_len": 256},
            model={"dtype": "bf16" if on_gpu() else "fp32"},
        )
        spec = losses.get("sgrpo")
        _, res = tr.train(plan_of(cfg, spec, spec.resolve_hparams()), model, tok, problems(256))
        return step_times([0.0] + [row["elapsed"] for row in res.history])

    return run


def trl_online(model, tok, steps: int) -> list[float]:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from oxbench.tasks.grading import is_correct
    from oxbench.text.formatting import format_prompt

    def reward(completions, answer, **_):
        return [float(is_correct(c, a)) for c, a in zip(completions, answer)]

    stamps, clock = trl_clock()

    rows = [{"prompt": format_prompt(tok, r["question"]), "answer": r["answer"]} for r in problems(256)]
    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(
            output_dir=out, per_device_train_batch_size=B_P * N, num_generations=N,
            max_completion_length=NEW_TOKENS, max_steps=steps + 1, learning_rate=1e-6, beta=0.0,
            temperature=1.0, top_k=0, loss_type="grpo", use_cpu=not on_gpu(), bf16=on_gpu(),
            use_vllm=trl_uses_vllm(), vllm_mode="colocate", vllm_gpu_memory_utilization=0.3,
            gradient_checkpointing=False, report_to=[], save_strategy="no", logging_steps=10**6,
            disable_tqdm=True, dataloader_num_workers=0,
        )  # fmt: skip
        trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=Dataset.from_list(rows),
                              processing_class=tok, callbacks=[clock])  # fmt: skip
        trainer.train()
    return step_times(stamps)


def bare_online(model, tok, steps: int) -> list[float]:
    """HF ``generate`` with per-step logits, the strict reward, group-normalised advantages, a token-mean
    policy-gradient loss (on-policy GRPO), AdamW: nothing else."""
    from oxbench.tasks.grading import is_correct
    from oxbench.text.batching import collate, token_logps
    from oxbench.text.formatting import format_prompt

    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    rows = problems(256)
    tok.padding_side = "left"
    times = []
    for i in range(steps + 1):
        t = time.perf_counter()
        chunk = rows[i * B_P : (i + 1) * B_P]
        enc = tok([format_prompt(tok, r["question"]) for r in chunk], return_tensors="pt", padding=True,
                  add_special_tokens=False)  # fmt: skip
        model.eval()
        with torch.no_grad():
            torch.manual_seed(i)
            out = model.generate(**enc, max_new_tokens=NEW_TOKENS, do_sample=True, top_k=0, temperature=1.0,
                                 num_return_sequences=N, pad_token_id=tok.pad_token_id,
                                 eos_token_id=tok.eos_token_id)  # fmt: skip
        model.train()
        p = enc["input_ids"].shape[1]
        seqs, rewards = [], []
        for j, row in enumerate(out[:, p:].tolist()):
            ids = row[: row.index(tok.eos_token_id) + 1] if tok.eos_token_id in row else row
            prompt = enc["input_ids"][j // N][enc["attention_mask"][j // N].bool()].tolist()
            seqs.append((prompt + ids, len(prompt)))
            rewards.append(
                float(is_correct(tok.decode(ids, skip_special_tokens=True), chunk[j // N]["answer"]))
            )
        r = torch.tensor(rewards).view(B_P, N)
        adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).view(-1, 1)
        logp, mask = token_logps(model, collate(seqs, tok.pad_token_id))
        loss = -(adv * logp * mask).sum() / mask.sum()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t)
    return times[1:]


# --------------------------------------------------------------------------- offline


def pair_rows(n: int) -> list[dict]:
    rows = []
    for r in problems(n):
        wrong = r["answer"].rsplit("####", 1)[0] + "#### " + str(int(r["answer"].rsplit("####", 1)[1]) + 1)
        rows.append({"id": r["id"], "question": r["question"], "chosen": r["answer"], "rejected": wrong})
    return rows


def oxbench_offline(model, tok, steps: int) -> list[float]:
    import losses
    from oxbench.config import RunConfig
    from oxbench.engine import build as tr
    from oxbench.engine import distributed as D
    from oxbench.engine.plan import plan_of

    D.init_distributed()
    cfg = RunConfig(
        method="dpo",
        train={
            "batch_size": DPO_BATCH,
            "lr": 1e-6,
            "warmup_ratio": 0.0,
            "max_steps": steps + 1,
            "check_reference": False,
        },  # fmt: skip
        data={"max_len": 256},
    )
    spec = losses.get("dpo")
    rows = pair_rows(DPO_BATCH * (steps + 1))
    _, res = tr.train(plan_of(cfg, spec, spec.resolve_hparams()), model, tok, rows)
    return step_times([0.0] + [row["elapsed"] for row in res.history])


def trl_offline(model, tok, steps: int) -> list[float]:
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    from oxbench.text.formatting import format_completion, format_prompt

    stamps, clock = trl_clock()

    rows = [
        {"prompt": format_prompt(tok, r["question"]), "chosen": format_completion(tok, r["chosen"]),
         "rejected": format_completion(tok, r["rejected"])}
        for r in pair_rows(DPO_BATCH * (steps + 1))
    ]  # fmt: skip
    with tempfile.TemporaryDirectory() as out:
        args = DPOConfig(
            output_dir=out, per_device_train_batch_size=DPO_BATCH, max_steps=steps + 1, learning_rate=1e-6,
            beta=0.1, use_cpu=True, bf16=False, gradient_checkpointing=False, report_to=[], save_strategy="no",
            logging_steps=10**6, disable_tqdm=True, precompute_ref_log_probs=True, max_length=256,
            dataloader_num_workers=0,
        )  # fmt: skip
        trainer = DPOTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok,
                             callbacks=[clock])  # fmt: skip
        trainer.train()
    return step_times(stamps)


def bare_offline(model, tok, steps: int) -> list[float]:
    """Reference log-probs computed once up front; per step one forward of chosen + rejected, the DPO loss
    and AdamW."""
    import torch.nn.functional as F

    from oxbench.text.batching import collate, encode_pair, token_logps
    from oxbench.text.formatting import format_completion, format_prompt

    rows = pair_rows(DPO_BATCH * (steps + 1))
    batches = []
    for i in range(steps + 1):
        chunk = rows[i * DPO_BATCH : (i + 1) * DPO_BATCH]
        seqs = [encode_pair(tok, format_prompt(tok, r["question"]), format_completion(tok, r[k]), 256)
                for k in ("chosen", "rejected") for r in chunk]  # fmt: skip
        batch = collate(seqs, tok.pad_token_id)
        with torch.no_grad():
            logp, mask = token_logps(model, batch)
        batches.append((batch, (logp * mask).sum(1)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    times = []
    for batch, ref in batches:
        t = time.perf_counter()
        logp, mask = token_logps(model, batch)
        delta = (logp * mask).sum(1) - ref
        loss = -F.logsigmoid(0.1 * (delta[:DPO_BATCH] - delta[DPO_BATCH:])).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t)
    return times[1:]


# --------------------------------------------------------------------------- the paired rounds

STUDIES = {
    "generate": ({"hf": gen_contender("hf"), "lean": gen_contender("lean")}, "hf"),
    "online": (
        {
            "oxbench-hf": oxbench_online("hf"),
            "oxbench-lean": oxbench_online("lean"),
            "oxbench-lean-share": oxbench_online("lean", share_prompt=True),
            "oxbench-defaults": oxbench_online(None),
            "trl": trl_online,
            "bare": bare_online,
        },
        "trl",
    ),  # fmt: skip
    "offline": ({"oxbench": oxbench_offline, "trl": trl_offline, "bare": bare_offline}, "bare"),
}


def measure(
    study: str, scale: str, base: str | None, steps: int, rounds: int, keep: list[str] | None = None
) -> dict:
    contenders, ref = STUDIES[study]
    vllm_here = os.environ.get("OXBENCH_VLLM_PYTHON") or trl_uses_vllm()
    if vllm_here and study in ("generate", "online"):
        contenders = {
            **contenders,
            **({"vllm": vllm_gen} if study == "generate" else {"oxbench-vllm": oxbench_online("vllm")}),
        }
    if keep:
        contenders = {k: v for k, v in contenders.items() if k in keep or k == ref}
    names = list(contenders)
    times: dict[str, list[list[float]]] = {k: [] for k in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            model, tok = load_model(scale, base)
            times[name].append(contenders[name](model, tok, steps))
            del model
            if on_gpu():
                torch.cuda.empty_cache()
            print(f"  {study} {scale} round {r}: {name} median {statistics.median(times[name][-1]) * 1e3:.0f} ms",
                  flush=True)  # fmt: skip
    med = {k: [statistics.median(t) for t in v] for k, v in times.items()}
    ratios = {k: statistics.median(a / b for a, b in zip(med[ref], med[k])) for k in names}
    return {"reference": ref, "median_s": {k: statistics.median(v) for k, v in med.items()},
            "speed_vs_reference": ratios, "per_round_median_s": med, "times_s": times}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("study", choices=list(STUDIES))
    ap.add_argument("--scales", nargs="+", default=["tiny-m", "tiny-l"])
    ap.add_argument("--base", nargs="*", default=[], help="SCALE=DIR: saved weights to use for a scale")
    ap.add_argument("--steps", type=int, default=4, help="timed steps per contender per round (+1 warm-up)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--contenders", nargs="*", default=None, help="only these (and the reference)")
    ap.add_argument(
        "--out", default=None, help="JSON file (default: benchmarks/results/throughput-STUDY.json)"
    )
    args = ap.parse_args()
    global DEVICE
    DEVICE = args.device
    torch.set_num_threads(args.threads)
    bases = dict(b.split("=", 1) for b in args.base)
    result = {"study": args.study, "threads": args.threads, "steps": args.steps, "rounds": args.rounds,
              "machine": {"cpu": platform.processor() or platform.machine(), "torch": torch.__version__},
              "device": torch.cuda.get_device_name(0) if on_gpu() else "cpu",
              "trl": "vLLM colocate" if trl_uses_vllm() else "HF generate (vllm not importable)" if on_gpu() else "HF generate",
              "scales": {}}  # fmt: skip
    for scale in args.scales:
        result["scales"][scale] = {"base": bases.get(scale, "random init"),
                                   **measure(args.study, scale, bases.get(scale), args.steps, args.rounds,
                                             args.contenders)}  # fmt: skip
    out = Path(args.out or Path(__file__).parent / "results" / f"throughput-{args.study}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    for scale, r in result["scales"].items():
        line = ", ".join(f"{k} {v:.2f}x" for k, v in r["speed_vs_reference"].items())
        print(f"{args.study} {scale} ({r['base']}): speed relative to {r['reference']}: {line}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
