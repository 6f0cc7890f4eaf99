"""A cell across nodes: one ``torchrun`` agent per node, the agents joined by torchrun's c10d rendezvous.

A cell of ``--nnodes N --nproc P`` is N agents, each starting P ranks; the agents meet at a rendezvous
endpoint (``host:port``, a TCP store that the first node's agent hosts) under an id that names the
cell. Global ranks, the seeded sampler, checkpoints and records are torchrun's and the cell's as on one
node: only the launch differs. Where the agents run is the executor's business:

* local: N agents on this machine (stand-ins for nodes, each a process group of its own, so a test can
  take one "node" down whole);
* Slurm: one ``srun`` task per node (submitit), the endpoint on the allocation's first host;
* Ray: one agent per bundle of a ``STRICT_SPREAD`` placement group, the endpoint on bundle 0's node.

When a node is lost (its agent and ranks killed, its machine gone) the ranks elsewhere fail in their
next collective (gloo or NCCL sees the connection close, or ``faults.collective_timeout_s`` passes) and
the cell is recorded as failed with one line that names the node first (:func:`lost_node`).
"""

from __future__ import annotations

import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Rendezvous:
    """Where a multi-node cell's agents meet: ``endpoint`` (``host:port``), ``rdzv_id`` (the cell's)."""

    nnodes: int
    endpoint: str
    rdzv_id: str


def free_endpoint(host: str = "127.0.0.1") -> str:
    """``host:port`` with a port free on this machine now (the node that hosts the rendezvous)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return f"{host}:{s.getsockname()[1]}"


def agent_command(
    cfg_file: Path, out: Path, nproc: int, rdzv: Rendezvous | None = None, node: int = 0
) -> list[str]:
    """The command that runs a cell's ranks on one node: plain Python for one rank on one node,
    ``torchrun --standalone`` for several, and a c10d rendezvous across nodes (``node`` 0 hosts it)."""
    cell = ["-m", "oxbench.grid.cell", str(cfg_file), str(out)]
    if rdzv is None or rdzv.nnodes == 1:
        if nproc == 1:
            return [sys.executable, *cell]
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={nproc}",
            *cell,
        ]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={rdzv.nnodes}",
        f"--nproc_per_node={nproc}",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint={rdzv.endpoint}",
        f"--rdzv_id={rdzv.rdzv_id}",
        f"--rdzv_conf=is_host={int(node == 0)}",
        "--max_restarts=0",
        *cell,
    ]


def ending(returncode: int) -> str:
    """How an agent ended, in words: ``killed by SIGKILL``, ``exited with code 1``."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"


def lost_node(ends: list[tuple[float, int, int, str]], nnodes: int) -> str | None:
    """The node to blame for a failed cell: of ``ends`` ((time, node, return code, host) per agent), the
    first agent killed by a signal (a node lost: the others' failures follow from it), else the first
    that failed, as ``node K of N (HOST) ...``; None when none failed."""
    failed = sorted((e[2] >= 0, e[0], e[1], e[2], e[3]) for e in ends if e[2] != 0)
    if not failed:
        return None
    _, _, node, rc, host = failed[0]
    return f"node {node} of {nnodes} ({host}) {ending(rc)}"


def log_name(node: int) -> str:
    """Where node ``node``'s agent writes (the first node's is the cell's ``train.log``)."""
    return "train.log" if node == 0 else f"train.node{node}.log"
