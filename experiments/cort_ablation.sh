#!/usr/bin/env bash
# CoRT ablations (SPEC §3) on the :tiny config, then the paper's four panels.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/cort_ablation}
python -m rljax.sweep --config configs/cort_grpo.py:tiny,steps=30 --workdir "$OUT"
python -m rljax.plot "$OUT"/*/ --out "$OUT/plots"
