#!/usr/bin/env bash
# Create a TPU slice and install rljax on every worker (wrapper over pod.py; add --dry_run
# to print the gcloud commands).   TPU_NAME=rl ZONE=us-east5-a ACCEL=v5p-16 SPOT=1 ./create_pod.sh
set -euo pipefail
: "${TPU_NAME:?set TPU_NAME}" "${ZONE:?set ZONE}"
POD="python3 $(dirname "$0")/pod.py"
$POD create --name "$TPU_NAME" --zone "$ZONE" --accelerator "${ACCEL:-v5p-8}" ${SPOT:+--spot} "$@"
$POD install --name "$TPU_NAME" --zone "$ZONE" "$@"
