"""Pre-trained tiny bases that ship with oxbench, found by their pre-training key.

Pre-training a tiny base takes minutes on a CPU (tiny-s: about 6), and a base trained on another
machine can differ from one trained here (``oxbench/models/pretrain.py``). So the bases the quickstart
and the committed studies use are files in the package: ``oxbench/models/bases/<key>/`` holds the
``save_pretrained`` weights (safetensors), the tokenizer and ``pretrain.json`` (the config and its
key), with ``SHA256SUMS`` listing every file's digest. :func:`install` checks each digest before the
base is used (a mismatch is a one-line :class:`~oxbench.models.tiny.ModelError` naming the file) and
copies the base into the cache where :func:`~oxbench.models.pretrain.ensure_pretrained` would have
trained it. Keys that do not ship are pre-trained as before. ``oxbench pretrain SCALE --check``
rebuilds a base and says whether it equals the shipped one bit for bit.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from oxbench.models.tiny import ModelError
from oxbench.utils import SEAL, publish_dir, seal, sha256_file, temp_dir_beside

BASES = Path(__file__).resolve().parent / "bases"
MANIFEST = "SHA256SUMS"


def shipped(key: str) -> Path | None:
    """The shipped base of pre-training key ``key``, if one ships."""
    d = BASES / key
    return d if (d / MANIFEST).is_file() else None


def verify(d: Path) -> None:
    """Every file ``d/SHA256SUMS`` lists is there with that digest (one-line ``ModelError`` if not)."""
    for line in (d / MANIFEST).read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        path = d / name
        if not path.is_file():
            raise ModelError(f"shipped base {d.name}: {path} is missing")
        if (got := sha256_file(path)) != digest:
            raise ModelError(
                f"shipped base {d.name}: {path} has SHA-256 {got[:16]}…, expected {digest[:16]}…"
            )


def install(key: str, dest: Path) -> bool:
    """Copy the shipped base of ``key`` into ``dest`` (checked, then renamed into place); False when
    none ships."""
    src = shipped(key)
    if src is None:
        return False
    verify(src)
    tmp = temp_dir_beside(dest)  # its own: another process may install the same base at once
    shutil.copytree(src, tmp, dirs_exist_ok=True)
    seal(tmp)  # the cache's own check on every use (oxbench.utils.cache_hit), before it is in place
    publish_dir(tmp, dest)  # another process installed it first: keep theirs
    return True


def ship(src: Path, key: str) -> Path:
    """Write the pre-trained base in ``src`` (a sealed cache directory) as the shipped base of ``key``,
    with its manifest. The cache's seal stays behind: it records this machine's file stamps, and
    :func:`install` seals each installed copy itself."""
    dest = BASES / key
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns(SEAL))
    files = sorted(p for p in dest.iterdir() if p.is_file() and p.name != MANIFEST)
    (dest / MANIFEST).write_text("".join(f"{sha256_file(p)}  {p.name}\n" for p in files))
    return dest


def same_weights(a: Path, b: Path) -> tuple[bool, float]:
    """(bitwise equal, largest absolute difference) of two bases' weights."""
    from safetensors.torch import load_file

    wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    if wa.keys() != wb.keys():
        return False, float("inf")
    diff = max(float((wa[k].double() - wb[k].double()).abs().max()) for k in wa)
    return all(wa[k].equal(wb[k]) for k in wa), diff
