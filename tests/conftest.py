"""Shared fixtures: a micro Qwen2 model saved like a Hugging Face checkpoint, an isolated cache."""

from __future__ import annotations

import os

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from oxbench.models.tokenizer import build_char_tokenizer


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own OXBENCH_CACHE, so nothing leaks between tests or from the user's cache."""
    monkeypatch.setenv("OXBENCH_CACHE", str(tmp_path_factory.mktemp("cache")))


def make_micro_model(seed: int = 0):
    tok = build_char_tokenizer()
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=32,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    return Qwen2ForCausalLM(cfg), tok


@pytest.fixture(scope="session")
def micro_model_dir(tmp_path_factory):
    """A saved micro model + char tokenizer: a 'Hugging Face model' given by local path."""
    d = tmp_path_factory.mktemp("micro_model")
    model, tok = make_micro_model()
    model.save_pretrained(d)
    tok.save_pretrained(d)
    return str(d)


# ------------------------------------------------------------------ scheduling under pytest-xdist
# The README's command runs the suite on two workers (``-n 2 --dist worksteal``; four were slower, docs/tests.md),
# and the order below serves any number. Four fifths of its time is ~35
# process-level tests (fault soaks, rank faults, executors, pre-emption); started last, one of them
# leaves a worker running alone for minutes. So the heaviest start first (longest first, the classic
# schedule). (``--dist loadgroup`` would keep a module with a costly module fixture on one worker, but
# xdist 3.8's group ids are lost under pytest 9.2: it sets ``item._nodeid``, which pytest 9.2 no longer
# reads.) Seconds: measured with --durations on the 2-core reference machine (2026-12-05, loaded);
# a name that no longer matches only loses its head start.
HEAVY_S = {  # wall seconds under `pytest -n 2` (CPU-profiled clean run, 2026-12-05), heaviest first
    "tests/test_soak.py::test_chaos_soak": 79,
    "tests/test_rank_fault_cells.py": 60,  # one grid, three faults (three grids of 72, 30 and 27 s before)
    "tests/test_preemption.py::test_a_preempted_ray_cell": 50,  # with the Ray GPU request since 2026-12-07
    "tests/test_executors.py::test_two_runs_of_one_grid_share_the_work": 42,
    "tests/test_real_checkpoint.py": 36,  # one grid of 16 cells, shared by the module
    "tests/test_preemption.py::test_a_preempted_slurm_job": 34,
    "tests/test_rank_faults.py::test_a_rank_killed_inside_a_checkpoint_write": 29,
    "tests/test_distributed.py": 75,  # two module fixtures: the runs (2 launches), the resumes (3)
    "tests/test_multinode.py::test_a_cell_preempted_on_two_ranks": 55,  # its reference and 3 segments
    "tests/test_multinode.py::test_a_two_node_cell_records_equal": 25,  # 2 cells, 1 as 2 nodes
    "tests/test_multinode.py::test_a_lost_node": 30,
    "tests/test_multinode.py::test_a_cell_spans_two_ray_nodes": 25,
    "tests/test_executors.py::test_the_local_executor_runs_every_cell": 17,
    "tests/test_losscheck.py::test_the_readme_walkthrough": 21,
    "tests/test_executors.py::test_a_full_disk_mid_grid": 20,
    "tests/test_online_invariance.py": 18,  # one module fixture: two launches side by side
    "tests/test_plugins.py::test_published_plugin_round_trip": 18,
    "tests/test_checkpoint.py::test_an_asynchronous_run_resumes_at_its_round": 18,
    "tests/test_executors.py::test_kill_minus_9_then_resume": 16,
    "tests/test_losscheck.py::test_the_full_check_trains_a_builtin": 8,
    "tests/test_warm_worker.py::test_a_cell_in_a_warm_worker_is_the_cell_in_a_fresh_process": 15,
    "tests/test_warm_worker.py::test_a_preparation_in_a_warm_worker": 14,
    "tests/test_warm_worker.py::test_a_worker_is_retired": 13,
    "tests/test_cli.py::test_nan_loss_fails_its_run": 13,
    "tests/test_cli_literal.py::test_a_cell_error_full_of_brackets": 13,
    "tests/test_sources.py::test_delayed_at_s0_is_the_sync_loop_bit_for_bit": 11,
    "tests/test_rank_faults.py::test_two_ranks_building_one_cold_reference_cache": 10,
    "tests/test_executors.py::test_ctrl_c_stops_the_grid": 10,
    "tests/test_warm_worker.py::test_a_worker_that_dies_fails_only_its_cell": 10,
    "tests/test_grid_report.py::test_a_grid_run_and_its_status_end_with_the_report": 10,
    "tests/test_losscheck.py::test_the_example_plugin_keeps_the_contract": 7,
    "tests/test_memory.py::test_the_grid_goes_on_after_a_cell_runs_out_of_memory": 6,
    "tests/test_vllm_backend.py::test_training_on_each_backend_learns": 2,
}


def _heavy_s(nodeid: str) -> int:
    return max((s for name, s in HEAVY_S.items() if nodeid.startswith(name)), default=0)


def _workers(config) -> int:
    """The number of pytest-xdist workers (1 without xdist)."""
    if hasattr(config, "workerinput"):  # in a worker: what the controller started
        return int(config.workerinput.get("workercount", 1))
    n = getattr(config.option, "numprocesses", None)
    return n if isinstance(n, int) and n > 0 else 1


def pytest_configure(config):
    """Under ``-n W`` each worker gets its share of the cores, as ``oxbench run --workers W`` gives its
    cells (:func:`oxbench.grid.executors.cell_threads`): ``OXBENCH_THREADS`` and ``OMP_NUM_THREADS``,
    set here in the controller before it starts the workers, so each worker's torch and every process
    a worker starts inherit them. W workers that each keep every core oversubscribe them, and OpenMP's
    waiting threads spin on the cores the other worker needs. A value set by the user stands."""
    from oxbench.grid.executors import cell_threads

    # the grids of the suite write no report.html (about 2 s of CPU each, for ~100 grids); the tests of
    # the report (test_grid_report.py) run theirs with the default (``oxbench run --report``)
    os.environ.setdefault("OXBENCH_REPORT", "0")
    w = _workers(config)
    if w > 1 and "OXBENCH_THREADS" not in os.environ:
        os.environ["OXBENCH_THREADS"] = os.environ["OMP_NUM_THREADS"] = str(cell_threads(w))


def pytest_collection_modifyitems(config, items):
    """Ordered for ``--dist worksteal`` on W workers, which hands each worker one W-th of the list and
    lets an idle worker take the tail of another's queue: the heavy tests are dealt between the W parts
    (each to the part with least so far, longest first) and start each part; the light tests fill the
    parts to equal length in their order. A module's tests with one weight (a shared module fixture) stay
    together. Run one at a time, the order does not matter."""
    units: dict[str, list] = {}  # a whole-module entry of HEAVY_S is one unit: its fixture runs once
    light = []
    for item in items:
        name = max((n for n in HEAVY_S if item.nodeid.startswith(n)), key=HEAVY_S.get, default=None)
        if name is None:
            light.append(item)
        else:
            units.setdefault(name if "::" not in name else item.nodeid, []).append(item)
    weight = {key: _heavy_s(group[0].nodeid) for key, group in units.items()}
    w = _workers(config)
    parts: list[list] = [[] for _ in range(w)]
    load = [0] * w
    for key in sorted(units, key=lambda k: -weight[k]):  # stable
        h = load.index(min(load))
        parts[h] += units[key]
        load[h] += weight[key]
    size, rest, ordered = -(-len(items) // w), list(light), []
    for part in parts:
        fill = max(0, size - len(part))
        ordered += part + rest[:fill]
        rest = rest[fill:]
    items[:] = ordered + rest
