"""Interleaved timing of several implementations, each in its own worker process.

The bench machine is shared and noisy, so ratios come from one run that alternates
the implementations call by call (A, B, C, A, B, C, ...) and compares medians. Each
worker is a process of the calling bench script started with `--worker NAME` (plus
`--src DIR`: the rljax tree it imports, e.g. an older commit unpacked by
`baseline_tree`), so two versions of rljax can be timed side by side.

Protocol: the worker prints `@@ready`, then for each `run` line on stdin it runs the
call once and prints `@@<seconds>`; `info` prints `@@<json>` of its `info()` dict.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def baseline_tree(rev: str, paths: tuple[str, ...] = ("rljax",)) -> str:
  """A temp dir holding `paths` (default `rljax/`) as of git `rev` (importable with sys.path)."""
  out = tempfile.mkdtemp(prefix="rljax_base_")
  tar = os.path.join(out, "src.tar")
  subprocess.run(["git", "-C", ROOT, "archive", "-o", tar, rev, *paths], check=True)
  with tarfile.open(tar) as t:
    t.extractall(out)
  os.remove(tar)
  return out


def resolve_rev(rev: str) -> str:
  return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", rev], check=True,
                        capture_output=True, text=True).stdout.strip()


def serve(run: Callable[[], object], info: Callable[[], dict] = dict) -> None:
  """Worker loop: one timed `run()` per `run` line (run must block until done)."""
  out = sys.stdout
  sys.stdout = sys.stderr  # stray prints must not break the protocol
  print("@@ready", file=out, flush=True)
  for line in sys.stdin:
    cmd = line.strip()
    if cmd == "run":
      t = time.perf_counter()
      run()
      print(f"@@{time.perf_counter() - t}", file=out, flush=True)
    elif cmd == "info":
      print("@@" + json.dumps(info()), file=out, flush=True)
    elif cmd == "quit":
      return


class Worker:
  def __init__(self, name: str, argv: list[str], env: dict | None = None):
    self.name = name
    self.proc = subprocess.Popen([sys.executable] + argv, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True,
                                 env={**os.environ, **(env or {})})
    self._read()  # @@ready

  def _read(self) -> str:
    while True:
      line = self.proc.stdout.readline()
      if not line:
        raise RuntimeError(f"bench worker {self.name!r} died (exit {self.proc.wait()})")
      if line.startswith("@@"):
        return line[2:].strip()

  def ask(self, cmd: str) -> str:
    self.proc.stdin.write(cmd + "\n")
    self.proc.stdin.flush()
    return self._read()

  def close(self) -> None:
    if self.proc.poll() is None:
      self.proc.stdin.write("quit\n")
      self.proc.stdin.flush()
      self.proc.wait()


def interleaved(workers: list[Worker], rounds: int, warmup: int = 1) -> dict[str, list[float]]:
  """{name: [seconds per call]}: `warmup` untimed rounds, then `rounds` alternating ones."""
  for _ in range(warmup):
    for w in workers:
      w.ask("run")
  times = {w.name: [] for w in workers}
  for r in range(rounds):
    for w in workers:
      times[w.name].append(float(w.ask("run")))
    print(f"round {r + 1}/{rounds}: " + "  ".join(f"{n} {t[-1]:.3f}s" for n, t in times.items()),
          flush=True)
  return times


def median(xs) -> float:
  return statistics.median(xs)


def load() -> list[float]:
  return [round(x, 2) for x in os.getloadavg()]
