"""A checkpoint's manifest, read without torch (``oxbench status`` checks checkpoints with it).

``manifest.json`` in a checkpoint directory holds its step, the world size that wrote it and the SHA-256
of every file; a checkpoint is usable only when every file matches (:func:`verify`).
"""

from __future__ import annotations

import json
from pathlib import Path

from oxbench.utils import sha256_file

MANIFEST = "manifest.json"


def verify(d: Path, world_size: int | None = None) -> str | None:
    """Why the checkpoint directory ``d`` cannot be used (None: it is whole); ``world_size``: also that it
    was written by that many ranks."""
    try:
        manifest = json.loads((d / MANIFEST).read_text())
        files = manifest["files"]
        if world_size is not None and manifest["world_size"] != world_size:
            return f"written by {manifest['world_size']} ranks, this run has {world_size}"
        for name, digest in files.items():
            if sha256_file(d / name) != digest:
                return f"{name} does not match its checksum"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"unreadable manifest or file ({type(exc).__name__}: {exc})"
    return None


def newest_usable(root: Path) -> tuple[Path | None, list[str]]:
    """The newest checkpoint under ``root`` (``step-*``) whose files match its manifest, and one line for
    each newer one that does not."""
    passed = []
    for d in sorted(root.glob("step-*"), reverse=True) if root.is_dir() else []:
        why = verify(d)
        if why is None:
            return d, passed
        passed.append(f"{d.name}: {why}")
    return None, passed
