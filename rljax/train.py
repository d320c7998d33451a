"""`python -m rljax.train --config configs/cort_grpo.py[:ARG] [--config.a.b=v ...] [--workdir DIR]`

Validates the resolved config against the registries before anything compiles,
writes it to the run directory, and trains (resuming when the directory holds a
checkpoint of the same run). The default workdir is runs/<config file name>, or
runs/<name>_<arg> for a variant (`:tiny` -> runs/cort_grpo_tiny). `--print_config`
prints the resolved config; `--config FILE --help` lists every config key.
"""
from __future__ import annotations

import os
import sys

from rljax import cli


def default_workdir(config_path: str) -> str:
  """runs/<config name>[_<arg>]: a variant never shares the main run's directory."""
  file, _, arg = config_path.partition(":")
  name = os.path.splitext(os.path.basename(file))[0]
  if arg:
    name += "_" + "".join(ch if ch.isalnum() or ch in "-." else "_" for ch in arg)
  return os.path.join("runs", name)


def main(argv=None) -> int:
  ap = cli.parser("python -m rljax.train", __doc__, config=True)
  ap.add_argument("--workdir", default=None, help="run directory (checkpoints, metrics, plots)")
  args, cfg = cli.parse_with_config(ap, argv)
  os.environ.setdefault("HF_HUB_OFFLINE", "1")
  from rljax import distributed
  distributed.initialize()  # multi-process runs; first, before any other JAX call
  cli.set_verbosity(args.verbosity, progress_bars=args.verbosity in ("debug", "info"))
  from rljax.config_check import ConfigError
  from rljax.trainer import Trainer, TrainingAborted
  from rljax.workdir import WorkdirError
  from rljax import paths
  workdir = args.workdir or cfg.workdir or default_workdir(args.config)
  try:
    paths.check_writable(workdir)  # gs:// needs gcsfs: refused before anything runs
  except (ImportError, ValueError) as e:
    ap.exit(2, f"{ap.prog}: error: {e}\n")
  try:
    trainer = Trainer(cfg, workdir)
  except (ConfigError, WorkdirError) as e:
    ap.exit(2, f"{ap.prog}: error: {e}\n")
  try:
    trainer.run()
  except TrainingAborted as e:  # non-zero exit, the message without a traceback
    raise SystemExit(f"rljax.train: {e}") from None
  return 0


if __name__ == "__main__":
  sys.exit(main())
