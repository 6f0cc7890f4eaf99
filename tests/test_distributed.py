"""DeepSpeed at world size 1 and 2 on CPU (gloo), ZeRO stages 0-3: the maths must not change.

* ZeRO-3 at world size 1 gives the same parameters as ZeRO-0;
* 2 processes x batch 4 (torchrun) give the same parameters as 1 process x batch 8, because the
  seeded DistributedSampler splits the same 8 examples between the ranks;
* the online loop runs sharded across 2 ranks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent


def job(method, zero, batch, accum, steps, *, where: Path, env: dict | None = None, tag: str = "") -> dict:
    """One run of ``dist_worker.py``: its arguments (its result file in ``where``) and its settings."""
    out = where / f"{method}-z{zero}-b{batch}-a{accum}{tag}.pt"
    return {"args": [str(a) for a in (method, zero, batch, accum, steps, out)], "env": env or {}}


def run_jobs(model_dir, jobs: list[dict], nproc=1, expect_rc=0) -> list[dict | None]:
    """Run ``jobs`` one after another in one launch (one process, or one torchrun world of ``nproc``);
    each one's saved result (None where it was pre-empted)."""
    jobs = [{**j, "args": [model_dir, *j["args"]]} for j in jobs]
    spec = Path(jobs[0]["args"][-1]).with_suffix(".jobs.json")
    spec.write_text(json.dumps(jobs))
    args = [str(HERE / "dist_worker.py"), "--jobs", str(spec)]
    if nproc > 1:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc_per_node={nproc}",
            "--standalone",
            *args,
        ]
    else:
        cmd = [sys.executable, *args]
    env = {
        **os.environ,
        "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "OMP_NUM_THREADS": "1",
    }
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == expect_rc, proc.stderr[-3000:]
    outs = [Path(j["args"][-1]) for j in jobs]
    return [torch.load(o, weights_only=True) if o.exists() else None for o in outs]


def assert_same_params(a, b, atol):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=atol, msg=lambda m, k=k: f"{k}: {m}")


# The module's runs, by name: (world size, method, ZeRO stage, batch, steps, settings). They run once per
# module, in two launches (one process, one torchrun world of 2) instead of one or two per test.
RUNS = {
    "dpo-z0": (1, "dpo", 0, 4, 2, {}),
    "dpo-z3": (1, "dpo", 3, 4, 2, {}),
    "dpo-z0-b8": (1, "dpo", 0, 8, 2, {}),
    "curve-z0": (1, "sgrpo", 0, 4, 2, {"CURVE_EVERY": "16"}),
    "curve-z3": (1, "sgrpo", 3, 4, 2, {"CURVE_EVERY": "16"}),
    "two-dpo-z3": (2, "dpo", 3, 4, 2, {}),
    "two-sgrpo-z2": (2, "sgrpo", 2, 4, 2, {}),
    "two-full-z3": (2, "sgrpo", 3, 4, 2, {}),
    "two-shared-z3": (2, "sgrpo", 3, 4, 2, {"SHARE_PROMPT": "1"}),
    "two-curve-z3": (2, "sgrpo", 3, 4, 2, {"CURVE_EVERY": "16"}),
    "two-delayed-z3": (2, "sgrpo", 3, 4, 3, {"DELAYED_S": "1"}),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, micro_model_dir) -> dict[str, dict]:
    """Every run of :data:`RUNS`: its saved result, plus its learning-curve rows under ``"curve"``."""
    where = tmp_path_factory.mktemp("distributed")
    jobs = {name: job(m, z, b, 1, steps, where=where, env=env, tag=f"-{name}")
            for name, (_, m, z, b, steps, env) in RUNS.items()}  # fmt: skip
    out = {}
    for nproc in (1, 2):
        names = [name for name, spec in RUNS.items() if spec[0] == nproc]
        out |= dict(zip(names, run_jobs(micro_model_dir, [jobs[n] for n in names], nproc=nproc)))
    for name, res in out.items():
        curve = Path(jobs[name]["args"][-1]).with_suffix(".curve.jsonl")
        if curve.exists():
            res["curve"] = [json.loads(line) for line in curve.read_text().splitlines()]
    return out


def test_zero3_equals_zero0_at_world_size_1(runs):
    z0, z3 = runs["dpo-z0"], runs["dpo-z3"]
    assert z3["steps"] == 2
    assert_same_params(z0["params"], z3["params"], atol=1e-6)


def test_two_ranks_zero3_equal_one_rank_double_batch(runs):
    one, two = runs["dpo-z0-b8"], runs["two-dpo-z3"]
    assert two["world"] == 2
    assert_same_params(one["params"], two["params"], atol=2e-6)


def test_online_loop_at_world_size_2_zero2(runs):
    res = runs["two-sgrpo-z2"]
    assert res["steps"] == 2 and res["world"] == 2
    assert all(torch.isfinite(torch.tensor(h["loss"])) for h in res["history"])


def test_shared_prompt_forward_under_zero3_at_world_size_2(runs):
    """Two forwards (prompts, then completions on their cache) before one backward, with ZeRO-3's
    partitioned parameters gathered per forward: the same steps as the full forward, to rounding."""
    full, shared = runs["two-full-z3"], runs["two-shared-z3"]
    assert shared["world"] == 2 and shared["steps"] == 2
    assert_same_params(full["params"], shared["params"], atol=1e-6)


def test_learning_curve_under_zero_stages_and_ranks(runs):
    """eval.every = 16 rollouts, 2 rounds of 4 prompts x 4: points at 0, 16 and 32 rollouts. The weights
    a point evaluates are gathered from every rank (collectively under ZeRO-3): at world size 1, ZeRO-3
    evaluates the very weights ZeRO-0 does; at world size 2 (ZeRO-3) the points fall at the same
    compute, counted over both ranks, and the base point sees the same weights."""
    z0, z3, two = (runs[name]["curve"] for name in ("curve-z0", "curve-z3", "two-curve-z3"))
    assert runs["two-curve-z3"]["world"] == 2
    for rows in (z0, z3, two):
        assert [r["rollouts"] for r in rows] == [0, 16, 32] and [r["step"] for r in rows] == [0, 1, 2]
    for a, b in zip(z0, z3):
        assert abs(a["checksum"] - b["checksum"]) <= 1e-4 * abs(a["checksum"])
        assert a["generated_tokens"] == b["generated_tokens"]
    assert z0[1]["checksum"] != z0[0]["checksum"]  # the policy moved between points
    assert two[0]["checksum"] == z0[0]["checksum"]


def test_delayed_source_at_world_size_2_zero3(runs):
    """The delayed source's snapshots are gathered from both ranks under ZeRO-3: at S = 1 over 3 rounds
    the learner sees lags 0, 1, 1."""
    res = runs["two-delayed-z3"]
    assert res["world"] == 2 and [h["staleness_max"] for h in res["history"]] == [0, 1, 1]


def test_deepspeed_builds_no_shm_op(tmp_path):
    """DeepSpeed JIT-compiled its CPU shared-memory op (50-125 s, a C++ toolchain) the first time a cell
    started, in a cache every virtualenv shared and rebuilt (issue 13). Starting the process group now
    builds and loads nothing: with an empty extensions directory it stays empty."""
    ext = tmp_path / "torch_extensions"
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(ext)}
    # a fresh process of its own: not the launcher variables (MASTER_PORT among them, a port this
    # process may still hold) that an in-process test's init_distributed left in os.environ
    for key in ("OXBENCH_DS_SHM_OP", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    code = "from oxbench.engine import distributed as D; D.init_distributed(); D.shutdown(); print('started')"
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "started" in res.stdout, res.stderr[-2000:]
    assert "shm_comm" not in res.stdout + res.stderr and not ext.exists()


RESUMED = [("dpo", 0), ("sgrpo", 0), ("dpo", 3)]


@pytest.fixture(scope="module")
def resumes(tmp_path_factory, micro_model_dir) -> dict:
    """Every resumed run of this module in three launches: 2 ranks (the never-stopped runs and the first
    segments, pre-empted), 1 rank (the moved run's middle segment), 2 ranks (the resumed runs)."""
    tmp = tmp_path_factory.mktemp("resumes")
    first, middle, last = [], [], []
    for method, zero in RESUMED:  # the same layout: stopped after step 2, resumed on 2 ranks
        d = tmp / f"{method}-z{zero}"
        (d / "whole").mkdir(parents=True)
        ckpt = {"CKPT_DIR": str(d / "ckpt")}
        first += [job(method, zero, 2, 1, 4, where=d / "whole"),
                  job(method, zero, 2, 1, 4, where=d, env={**ckpt, "STOP_AT": "2"})]  # fmt: skip
        last.append(job(method, zero, 2, 1, 4, where=d, env=ckpt))
    d = tmp / "moved"  # 2 ranks ZeRO-3 to step 1, 1 rank ZeRO-0 to step 3, 2 ranks ZeRO-3 to the end
    (d / "whole").mkdir(parents=True)
    ckpt = {"CKPT_DIR": str(d / "ckpt")}
    first += [
        job("dpo", 3, 2, 1, 4, where=d / "whole"),
        job("dpo", 3, 2, 1, 4, where=d, env={**ckpt, "STOP_AT": "1"}),
    ]
    middle.append(job("dpo", 0, 2, 1, 4, where=d, env={**ckpt, "STOP_AT": "3"}))
    last.append(job("dpo", 3, 2, 1, 4, where=d, env=ckpt))
    outs = run_jobs(micro_model_dir, first, nproc=2, expect_rc=1)  # a pre-empted run: code 4 from its ranks
    between = run_jobs(micro_model_dir, middle, expect_rc=4)
    again = run_jobs(micro_model_dir, last, nproc=2)
    return {"tmp": tmp, "first": outs, "middle": between, "last": again}


def test_resume_at_world_size_2_is_bitwise(resumes):
    """Two ranks, pre-empted after step 2 of 4 (the flag raised on rank 0 only: the ranks agree through
    the collective check) and resumed from the checkpoint in a fresh launch: the weights are bitwise those
    of the run that was never stopped. For dpo and sgrpo at ZeRO-0 and dpo at ZeRO-3."""
    outs, again = resumes["first"], resumes["last"]
    for i, (method, zero) in enumerate(RESUMED):
        whole, stopped = outs[2 * i], outs[2 * i + 1]
        saved = resumes["tmp"] / f"{method}-z{zero}" / "ckpt" / "checkpoints"
        assert stopped is None, (method, zero)  # it saved nothing: pre-empted
        assert sorted(p.name for p in (saved / "step-00000002").iterdir()) == [
            "engine0.safetensors", "engine1.safetensors", "manifest.json",
            "rank0.json", "rank0.safetensors", "rank1.json", "rank1.safetensors",
        ], (method, zero)  # fmt: skip
        assert again[i]["resumed_from"] == 2 and again[i]["steps"] == whole["steps"] == 4, (method, zero)
        assert_same_params(whole["params"], again[i]["params"], atol=0)


def test_resume_across_world_sizes_and_zero_stages(resumes):
    """A run written at 2 ranks under ZeRO-3, pre-empted after step 1 of 4, resumes on 1 rank without
    ZeRO (2 micro-batches per step: the global batch kept), is pre-empted again after step 3 and ends on
    2 ranks under ZeRO-3. Its weights, AdamW moments and step, and the examples of every step equal the
    run that was never stopped (the reduction order changes with the ranks: float tolerance)."""
    whole, stopped = resumes["first"][-2:]
    assert stopped is None and resumes["middle"] == [None]
    end = resumes["last"][-1]
    assert end["resumed_from"] == 3 and end["steps"] == whole["steps"] == 4
    assert end["order"] == whole["order"]  # no example seen twice or skipped
    assert end["adam_step"] == whole["adam_step"] == 4
    assert_same_params(whole["params"], end["params"], atol=1e-6)
    assert_same_params(whole["optim"], end["optim"], atol=1e-6)
    assert [r["step"] for r in end["history"]] == [1, 2, 3, 4]


def test_a_stale_extension_build_lock_is_an_error_naming_it(tmp_path, monkeypatch):
    """kill -9 during DeepSpeed's JIT build left torch's lock file behind, and every later cell waited on
    it forever (issue 16). With the build opted into, a lock older than any build is a one-line error
    naming the file; a fresh one (a build in progress) is left to torch."""
    import time

    from oxbench.engine import distributed as D

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    lock = tmp_path / "deepspeed_shm_comm" / "lock"
    lock.parent.mkdir(parents=True)
    lock.touch()
    D.check_build_lock("deepspeed_shm_comm")  # fresh: a build may be running
    old = time.time() - 3600
    os.utime(lock, (old, old))
    with pytest.raises(D.StaleLockError, match=f"{lock}: a build lock 60 min old, left by a killed build"):
        D.check_build_lock("deepspeed_shm_comm")
