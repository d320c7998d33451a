#!/usr/bin/env bash
# Delete the TPU slice (checkpoints live in the run directory, e.g. a gs:// bucket).
set -euo pipefail
: "${TPU_NAME:?set TPU_NAME}" "${ZONE:?set ZONE}"
gcloud compute tpus tpu-vm delete "$TPU_NAME" --zone="$ZONE" --quiet
