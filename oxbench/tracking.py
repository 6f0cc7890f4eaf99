"""Live experiment tracking through the libraries users already have (``track:`` in a run or grid config).

* ``tensorboard`` (the default, offline): event files in ``<run_dir>/tb/<arm> s<seed>/``, so
  ``tensorboard --logdir OUT/<grid>`` shows every run of a grid named by its arm and seed;
* ``wandb``: a W&B run in project ``<grid>``, grouped by arm (``WANDB_MODE=offline`` works without a
  network; the files go to ``<run_dir>/wandb``);
* ``mlflow``: an MLflow run in experiment ``<grid>`` at ``$MLFLOW_TRACKING_URI``, else a local file
  store, ``OUT/mlruns``;
* ``trackio``: a trackio run in project ``<grid>``, stored locally (``$TRACKIO_DIR``).

Every row a run writes to its records also goes to every backend while the run trains: each logged
optimiser step (``train/*``, with the compute ledger), each learning-curve point (``curve/*``) and the
final evaluation (``eval/*``); each section has its own x-axis (``train/step``, ``curve/rollouts``,
``eval/step``). A backend that cannot start (its package missing, no API key, a server unreachable) or
fails later is a one-line warning, and the run goes on logging to its records. Only rank 0 tracks. A
run resumed from a checkpoint logs its rows again from the checkpoint's step on.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from pathlib import Path

BACKENDS = ("tensorboard", "wandb", "mlflow", "trackio")
PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow", "trackio": "trackio"}
X_AXIS = {"train": "step", "curve": "rollouts", "eval": "step"}


def numbers(row: dict) -> dict[str, float]:
    """The row's plottable values (numbers, not flags), NaN and infinities included."""
    return {k: float(v) for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class TensorBoard:
    def __init__(self, run_dir: Path, project: str, name: str, group: str, config: dict):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(Path(run_dir) / "tb" / re.sub(r"[^\w.=+-]+", "_", name)))
        self.writer.add_text("config", f"```\n{json.dumps(config, indent=1, default=str)}\n```")

    def log(self, section: str, row: dict, step: int) -> None:
        for k, v in numbers(row).items():
            self.writer.add_scalar(f"{section}/{k}", v, step)
        self.writer.flush()  # streams: visible while the run trains

    def close(self) -> None:
        self.writer.close()


class WandB:
    def __init__(self, run_dir: Path, project: str, name: str, group: str, config: dict):
        import wandb

        settings = wandb.Settings(silent=True, console="off", init_timeout=60)
        self.run = wandb.init(
            project=project,
            name=name,
            group=group,
            config=config,
            dir=str(run_dir),
            settings=settings,
            reinit="finish_previous",
        )
        for section, x in X_AXIS.items():
            self.run.define_metric(f"{section}/{x}")
            self.run.define_metric(f"{section}/*", step_metric=f"{section}/{x}")

    def log(self, section: str, row: dict, step: int) -> None:
        values = {f"{section}/{k}": v for k, v in numbers(row).items()}
        self.run.log({**values, f"{section}/{X_AXIS[section]}": step})

    def close(self) -> None:
        self.run.finish()


class MLflow:
    def __init__(self, run_dir: Path, project: str, name: str, group: str, config: dict):
        uri = (
            os.environ.get("MLFLOW_TRACKING_URI")
            or (Path(run_dir).parent.parent / "mlruns").resolve().as_uri()
        )
        if uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # the local store, offline
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(uri)
        exp = self.client.get_experiment_by_name(project)
        exp_id = exp.experiment_id if exp else self._create(project)
        self.run_id = self.client.create_run(exp_id, run_name=name, tags={"arm": group}).info.run_id
        self.client.log_dict(self.run_id, config, "config.json")

    def _create(self, project: str) -> str:
        try:
            return self.client.create_experiment(project)
        except Exception:  # another cell of the grid created it first
            return self.client.get_experiment_by_name(project).experiment_id

    def log(self, section: str, row: dict, step: int) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [
            Metric(f"{section}/{k}", v, now, step) for k, v in numbers(row).items() if math.isfinite(v)
        ]
        self.client.log_batch(self.run_id, metrics=metrics)

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class Trackio:
    def __init__(self, run_dir: Path, project: str, name: str, group: str, config: dict):
        import trackio

        self.trackio = trackio
        trackio.init(
            project=project,
            name=name,
            group=group,
            config=config,
            embed=False,
            auto_log_cpu=False,
            auto_log_gpu=False,
        )

    def log(self, section: str, row: dict, step: int) -> None:
        values = {f"{section}/{k}": v for k, v in numbers(row).items()}
        self.trackio.log({**values, f"{section}/{X_AXIS[section]}": step})

    def close(self) -> None:
        self.trackio.finish()


CLASSES = {"tensorboard": TensorBoard, "wandb": WandB, "mlflow": MLflow, "trackio": Trackio}


def warn(msg: str) -> None:
    print(f"warning: tracking: {msg}; the run logs to its records only", file=sys.stderr, flush=True)


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


class Tracker:
    """The run's backends; :meth:`log` sends a row to each, and a backend that fails is dropped."""

    def __init__(self, backends: dict | None = None, status: dict | None = None):
        self.backends, self.status = backends or {}, status or {}

    @classmethod
    def start(cls, names, *, run_dir: Path, project: str, name: str, group: str, config: dict) -> Tracker:
        backends, status = {}, {}
        for backend in names:
            try:
                backends[backend] = CLASSES[backend](run_dir, project, name, group, config)
                status[backend] = "ok"
            except BaseException as exc:  # noqa: BLE001  (an import that exits, a login prompt: not fatal)
                if isinstance(exc, KeyboardInterrupt):
                    raise
                status[backend] = f"unavailable: {_why(exc)}"
                warn(f"{backend} {status[backend]}")
        return cls(backends, status)

    def log(self, section: str, row: dict, step: int) -> None:
        for backend, b in list(self.backends.items()):
            try:
                b.log(section, row, step)
            except Exception as exc:
                self.status[backend] = f"failed: {_why(exc)}"
                warn(f"{backend} {self.status[backend]}")
                del self.backends[backend]

    def close(self) -> None:
        for backend, b in self.backends.items():
            try:
                b.close()
            except Exception as exc:
                warn(f"{backend} did not close: {_why(exc)}")
        self.backends = {}
