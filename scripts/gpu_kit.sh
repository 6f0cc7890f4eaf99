#!/usr/bin/env bash
# The GPU kit: one folder, gpu_kit/ (git-ignored), that a lent GPU machine needs and nothing more. It
# replaces the old route (the whole checkout plus wheels/), which cannot travel: the tracked tree is
# about 128 MiB with results/, and a device call carries 64 MiB in all.
#
#   gpu_kit/src/       the project at HEAD (git archive), without results/, stamped with its commit
#                      (src/oxbench/_export.json: a record run from it names that commit, not "unknown")
#   gpu_kit/wheels/    what the GPU image lacks, for CPython 3.12 (and CI's 3.11) on manylinux x86_64, never torch:
#                      pydantic and its dependencies, deepspeed (built here as a pure-Python wheel,
#                      DS_BUILD_OPS=0: oxbench uses torch's AdamW) and hjson, and TRL's GRPOTrainer for
#                      the side-by-side timing (trl, datasets 4.8.5, which accepts pyarrow >= 21, dill,
#                      multiprocess). The image has ninja, py-cpuinfo, msgpack, einops, psutil, tqdm,
#                      pyarrow, xxhash (/work/.library/device/KINDS.md); vllm and lm-eval are too large.
#   gpu_kit/run.sh     on the machine: installs the wheels whose package is missing or older (--no-deps
#                      --no-index: torch untouched), then oxbench from src/ (--no-deps), then runs the smoke
#                      (scripts/gpu_smoke.sh); `run.sh install` stops after the install (CI)
#
# The kit is at most 32 MiB; above that this script fails. It holds HEAD: commit what should travel first.
#
#   bash scripts/gpu_kit.sh        then the device call of docs/gpus.md ("The GPU smoke"): carry ["gpu_kit"]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
KIT="${GPU_KIT:-gpu_kit}"
LIMIT_MIB=32

sha=$(git rev-parse HEAD)
if [[ -n "$(git status --porcelain --untracked-files=no)" ]]; then
    echo "gpu_kit: uncommitted changes stay behind: the kit holds HEAD, ${sha:0:12}" >&2
fi
rm -rf "$KIT" && mkdir -p "$KIT/src" "$KIT/wheels"
git archive --format=tar HEAD -- . ':(exclude)results' | tar -x -C "$KIT/src"
printf '{"git_sha": "%s", "exported": "%s", "how": "git archive HEAD without results/ (scripts/gpu_kit.sh)"}\n' \
    "$sha" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$KIT/src/oxbench/_export.json"
cp "$KIT/src/scripts/gpu_kit_run.sh" "$KIT/run.sh"

# for the machine's CPython 3.12, and for CI's 3.11 (the CPU torch wheel here is cp311): two packages
# have wheels per Python version (pydantic_core, multiprocess; 2 MiB), run.sh installs the ones that fit
for py in 3.12 3.11; do
    "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$py" --implementation cp \
        --abi "cp${py/./}" --abi abi3 --abi none --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux_2_28_x86_64 --platform any -d "$KIT/wheels" \
        pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
        typing_extensions==4.16.0 hjson==3.1.0 trl==1.16.0 datasets==4.8.5 dill==0.4.1 multiprocess==0.70.19
done
# deepspeed is an sdist only; its setup imports torch, so it builds with this environment's (no isolation)
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
"$PY" -m pip download --quiet --no-deps --no-binary :all: -d "$build" deepspeed==0.19.8
DS_BUILD_OPS=0 "$PY" -m pip wheel --quiet --no-deps --no-build-isolation -w "$KIT/wheels" "$build"/deepspeed-*.tar.gz

mib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1048576 }'; }
for f in "$KIT"/wheels/*.whl; do printf '%8s MiB  %s\n' "$(mib "$(stat -c %s "$f")")" "${f##*/}"; done
total=$(du -sb "$KIT" | cut -f1)
printf 'gpu_kit: %s MiB in all (src %s MiB, wheels %s MiB; limit %d MiB), commit %s\n' "$(mib "$total")" \
    "$(mib "$(du -sb "$KIT/src" | cut -f1)")" "$(mib "$(du -sb "$KIT/wheels" | cut -f1)")" "$LIMIT_MIB" "$sha"
if (( total > LIMIT_MIB * 1048576 )); then
    echo "gpu_kit: ERROR: $(mib "$total") MiB is over the kit's $LIMIT_MIB MiB: it would not travel" >&2
    exit 1
fi
