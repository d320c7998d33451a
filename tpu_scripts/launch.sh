#!/usr/bin/env bash
# Launch one rljax run on every worker of a TPU slice (multi-host: jax.distributed is
# initialized from the TPU environment by rljax.train).
#   TPU_NAME=rljax-v5p ZONE=us-east5-a ./tpu_scripts/launch.sh configs/cort_grpo.py:model=/data/qwen3-4b \
#       --workdir=gs://bucket/runs/cort_qwen3_4b --config.mesh.shape='(1,-1,4)'
# A preempted run is resumed by launching the same command again.
set -euo pipefail
: "${TPU_NAME:?set TPU_NAME}" "${ZONE:?set ZONE}"
CONFIG=${1:?usage: launch.sh CONFIG [flags...]}; shift
ARGS=$(printf ' %q' "$@")
gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" --worker=all --command "
  cd ~/rljax && . .venv/bin/activate && export HF_HUB_OFFLINE=1 &&
  nohup python -m rljax.train --config $CONFIG $ARGS > ~/rljax_run.log 2>&1 &"
echo "launched on all workers of $TPU_NAME; logs: ~/rljax_run.log on each worker"
