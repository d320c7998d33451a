#!/usr/bin/env bash
# Launch one run on every worker (wrapper over pod.py): TPU_NAME=rl ZONE=us-east5-a \
#   ./launch.sh configs/pod.py:model=qwen3_4b --workdir=gs://bucket/runs/q4 [--config.x=y ...]
# Relaunching the same command resumes from the newest checkpoint in the workdir.
set -euo pipefail
: "${TPU_NAME:?set TPU_NAME}" "${ZONE:?set ZONE}"
CONFIG=${1:?usage: launch.sh CONFIG --workdir=DIR [rljax.train flags...]}; shift
WORKDIR=""; REST=()
for a in "$@"; do
  case "$a" in --workdir=*) WORKDIR=${a#--workdir=} ;; *) REST+=("$a") ;; esac
done
exec python3 "$(dirname "$0")/pod.py" launch --name "$TPU_NAME" --zone "$ZONE" \
  --config "$CONFIG" --workdir "$WORKDIR" ${DRY_RUN:+--dry_run} -- "${REST[@]}"
