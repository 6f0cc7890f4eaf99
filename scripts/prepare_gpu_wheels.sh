#!/usr/bin/env bash
# Wheels for the GPU smoke (scripts/gpu_smoke.sh), into the git-ignored wheels/ beside the tree.
#
# The GPU machine that may be lent has no network and its own CUDA torch (Python 3.12, torch 2.11,
# transformers, accelerate, peft, pandas, pyarrow, scipy, requests, xxhash, msgpack, ninja, einops,
# py-cpuinfo, ...: /work/.library/device/KINDS.md lists its image) but no deepspeed, trl, datasets,
# lm-eval, pydantic or vllm. What it lacks travels beside the tree, and the tree with what it carries
# must stay under 64 MiB (the tracked tree alone is about 55 MiB, mostly results/), so only the packages
# missing there are downloaded, for CPython 3.12 on manylinux x86_64, and never torch. deepspeed is an
# sdist only: it is built here into a pure-Python wheel (no compiled ops; oxbench uses torch's AdamW).
# Not carried, by size: vllm (hundreds of MB with its CUDA kernels: the smoke's vLLM cells are skipped
# with that reason) and lm-eval with its dependencies (evaluate, pytablewriter, rouge-score, ...; the
# smoke evaluates with oxbench's own evaluator). datasets is 4.8.5, which accepts pyarrow >= 21 (the
# machine's pyarrow is not pinned in its list; datasets 5 needs >= 24).
#
#   bash scripts/prepare_gpu_wheels.sh            # then the device run carries ["wheels"]
set -euo pipefail
cd "$(dirname "$0")/.."
PIP="${PIP:-python -m pip}"
OUT=wheels
LIMIT_MIB=60    # the wheels alone
TREE_MIB=64     # the working tree that travels, with the wheels

rm -rf "$OUT" && mkdir -p "$OUT"
TARGET=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64
        --platform any)
# oxbench's config (pydantic) and the engine's imports that the machine lacks
CORE=(pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
      typing_extensions==4.16.0 hjson==3.1.0)
# TRL's GRPOTrainer, side by side
TRL=(trl==1.16.0 datasets==4.8.5 dill==0.4.1 multiprocess==0.70.19)
$PIP download --quiet --no-deps "${TARGET[@]}" -d "$OUT" "${CORE[@]}" "${TRL[@]}"

build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
$PIP download --quiet --no-deps --no-binary :all: -d "$build" deepspeed==0.19.8
DS_BUILD_OPS=0 $PIP wheel --quiet --no-deps --no-build-isolation -w "$OUT" "$build"/deepspeed-*.tar.gz

for f in "$OUT"/*.whl; do printf '%8.2f MiB  %s\n' "$(echo "$(stat -c %s "$f") / 1048576" | bc -l)" "${f##*/}"; done
wheels=$(du -sb "$OUT" | cut -f1)
tree=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
mib() { echo "$1 / 1048576" | bc -l; }
printf 'wheels/: %d files, %.2f MiB (limit %d MiB); with the tree that travels: %.2f MiB (limit %d MiB)\n' \
    "$(find "$OUT" -name "*.whl" | wc -l)" "$(mib "$wheels")" "$LIMIT_MIB" "$(mib $((wheels + tree)))" "$TREE_MIB"
if (( wheels > LIMIT_MIB * 1048576 || wheels + tree > TREE_MIB * 1048576 )); then
    echo "error: too large to travel: the device run carries 64 MiB in all, the tree included" >&2
    exit 1
fi
