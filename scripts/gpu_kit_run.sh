#!/usr/bin/env bash
# The GPU kit's run script (scripts/gpu_kit.sh copies it to gpu_kit/run.sh). On the lent GPU machine:
#
#   bash gpu_kit/run.sh            install, then the smoke (scripts/gpu_smoke.sh): records and summary to $OUT
#   bash gpu_kit/run.sh install    the install alone (.ci/run's GPU-versions job)
#
# The install is the machine's: the kit's wheels for its Python whose package is missing there (or older
# than the kit's) with --no-deps --no-index, so torch and the image's libraries stay as they are; then oxbench
# from the kit's src/, editable, with --no-deps. PYTHON names the interpreter (default python3).
set -uo pipefail
KIT="$(cd "$(dirname "$0")" && pwd)"
PY="${PYTHON:-python3}"
cd "$KIT/src" || exit 1   # so that the check below imports the kit's oxbench, not one in the caller's folder

mapfile -t missing < <("$PY" - "$KIT/wheels" <<'PY'
import glob, os, sys
from importlib.metadata import PackageNotFoundError, version
from packaging.tags import sys_tags
from packaging.utils import parse_wheel_filename
from packaging.version import Version
here = set(sys_tags())
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.whl"))):
    name, ver, _, tags = parse_wheel_filename(os.path.basename(path))
    if not tags & here:  # the wheel of another Python version
        continue
    try:
        have = Version(version(name))
    except PackageNotFoundError:
        have = None
    if have is None or have < ver:
        print(path)
PY
)
echo "gpu_kit: installing ${#missing[@]} wheel(s): ${missing[*]##*/}"
if (( ${#missing[@]} )); then
    "$PY" -m pip install -q --no-deps --no-index --no-cache-dir "${missing[@]}" || exit 1
fi
"$PY" -m pip install -q --no-deps --no-index --no-build-isolation -e "$KIT/src" || exit 1
"$PY" -c "import torch, deepspeed, pydantic, oxbench; from oxbench.grid.runs import git_sha
print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), '| deepspeed', deepspeed.__version__,
      '| oxbench', git_sha())" || exit 1
[[ "${1:-}" == install ]] && exit 0
exec bash "$KIT/src/scripts/gpu_smoke.sh"
