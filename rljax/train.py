"""`python -m rljax.train --config configs/cort_grpo.py[:ARG] [--config.a.b=v ...] [--workdir DIR]`

Validates the resolved config against the registries before anything compiles,
writes it to the run directory, and trains (resuming when the directory holds a
checkpoint). The default workdir is runs/<config file name>.
"""
from __future__ import annotations

import os
import sys

from absl import app, flags
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "config file[:arg]", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "run directory (checkpoints, metrics, plots)")


def default_workdir(config_path: str) -> str:
  name = os.path.splitext(os.path.basename(config_path.split(":")[0]))[0]
  return os.path.join("runs", name)


def main(argv):
  del argv
  os.environ.setdefault("HF_HUB_OFFLINE", "1")
  sys.path.insert(0, os.getcwd())  # `configs/` next to the checkout
  from rljax import distributed
  distributed.initialize()  # multi-process runs; first, before any other JAX call
  from rljax.config_check import ConfigError
  from rljax.trainer import Trainer, TrainingAborted
  cfg = _CONFIG.value
  workdir = _WORKDIR.value or cfg.workdir or default_workdir(_config_path())
  from rljax import paths
  try:
    paths.check_writable(workdir)  # gs:// needs gcsfs: refused before anything runs
  except (ImportError, ValueError) as e:
    raise app.UsageError(str(e)) from None
  try:
    trainer = Trainer(cfg, workdir)
  except ConfigError as e:
    raise app.UsageError(str(e)) from None
  try:
    trainer.run()
  except TrainingAborted as e:  # non-zero exit, the message without a traceback
    raise SystemExit(f"rljax.train: {e}") from None


def _config_path() -> str:
  for i, a in enumerate(sys.argv):
    if a.startswith("--config="):
      return a.split("=", 1)[1]
    if a == "--config" and i + 1 < len(sys.argv):
      return sys.argv[i + 1]
  return "run"


if __name__ == "__main__":
  flags.mark_flag_as_required("config")
  app.run(main)
