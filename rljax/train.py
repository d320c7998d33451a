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
  if distributed.initialize() and args.verbosity in ("warning", "error"):
    cli.drop_gloo_lines()  # gloo's "[Gloo] Rank r is connected to ..." lines
  cli.set_verbosity(args.verbosity, progress_bars=args.verbosity in ("debug", "info"))
  from rljax import paths
  workdir = args.workdir or cfg.workdir or default_workdir(args.config)
  try:
    paths.check_writable(workdir)  # gs:// needs gcsfs: refused before anything runs
  except (ImportError, ValueError) as e:
    ap.exit(2, f"{ap.prog}: error: {e}\n")
  train_or_exit(cfg, workdir, ap.prog, args.verbosity)
  return 0


def train_or_exit(cfg, workdir: str, prog: str, verbosity: str) -> dict:
  """`Trainer(cfg, workdir).run()`, or an exit with the error in one line.

  A config or workdir error exits 2, any other failure 1, each as one line on stderr
  naming what to fix (`--verbosity debug` re-raises with the traceback). A run that fails
  before its first result leaves its workdir as it found it (`StartupRollback`). On several
  processes a failing process exits at once (`os._exit`), never waiting for the others at
  JAX's shutdown barrier: they stop on the next collective or the missed heartbeat.
  """
  from rljax import distributed as dist
  from rljax.config_check import ConfigError
  from rljax.trainer import Trainer, TrainingAborted
  from rljax.workdir import StartupRollback, WorkdirError
  rollback = StartupRollback(workdir)
  try:
    return Trainer(cfg, workdir).run()
  except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - reported in one line below
    removed = dist.is_writer() and rollback.rollback()
    if verbosity == "debug" or isinstance(e, KeyboardInterrupt):
      raise
    usage = isinstance(e, (ConfigError, WorkdirError))
    notes = [f"nothing was kept in {workdir}"] if removed else []
    if not isinstance(e, (ConfigError, WorkdirError, TrainingAborted)):
      notes.append("--verbosity debug prints the traceback")
    head = f"{prog}: " if isinstance(e, TrainingAborted) else f"{prog}: error: "
    sys.stderr.write(head + cli.one_line(e) + "\n" +
                     (f"{prog}: ({'; '.join(notes)})\n" if notes else ""))
    sys.stderr.flush()
    sys.stdout.flush()
    code = 2 if usage else 1
    if dist.is_multiprocess():
      cli.restore_stdout()
      os._exit(code)
    raise SystemExit(code) from None


if __name__ == "__main__":
  sys.exit(main())
