#!/usr/bin/env bash
# Training–inference mismatch (SPEC §5): each correction with a quantized sampler, fresh
# and 4-step stale, on the :tiny config.
set -euo pipefail
cd "$(dirname "$0")/.."
for c in tis sc tis_sc; do
  python -m rljax.sweep --config "configs/$c.py:tiny,steps=20" --workdir "runs/mismatch/$c"
done
python -m rljax.plot runs/mismatch/*/*/ --out runs/mismatch/plots
