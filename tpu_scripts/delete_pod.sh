#!/usr/bin/env bash
# Delete the TPU slice (checkpoints live in the run directory, e.g. a gs:// bucket).
set -euo pipefail
: "${TPU_NAME:?set TPU_NAME}" "${ZONE:?set ZONE}"
exec python3 "$(dirname "$0")/pod.py" delete --name "$TPU_NAME" --zone "$ZONE" "$@"
