"""The golden and equivalence tests (marked `numerics`) hold on another CPU.

XLA:CPU orders float32 sums by the processor it compiles for (vector width, GEMM blocking),
so a test's float results move in the last bits from one CPU model to the next. A tolerance
taken from one machine's output (`rtol=1e-9` on a float32 sum) passes there and fails on the
next. This test reruns the `numerics` tests in RERUN (the objectives' SPEC goldens and
properties, the train step's goldens and equivalences, the replay's) in a subprocess compiled
for another instruction set (`--xla_cpu_max_isa`: the nearest one below this CPU's that
changes its float32 train step — AVX2 on an AVX-512 machine), which reorders those sums on
this very machine (vector widths, and so the order of float32 arithmetic, follow the ISA), so
such a tolerance fails here, before it lands. Where no lower ISA changes the step, the
test skips and says so. The other `numerics` tests (the model's and the sampler's
equivalences: chunked == naive, blockwise == dense, sharded == unsharded) compare two programs
compiled for the same CPU, not a committed number; rerunning them all doubled this test's
time (≈ 610 s on 2 cores), so they are left to a run by hand:
`XLA_FLAGS=--xla_cpu_max_isa=AVX2 python -m pytest -m numerics tests`.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.trainer.helpers import compile_cache_env, xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RERUN = ("tests/objectives", "tests/test_train_step.py", "tests/test_replay.py")
# Σ|params| after the golden fused train step of tests/test_train_step.py (float64 sum of
# the float32 params): where another ISA orders the step's float32 arithmetic differently,
# this moves in the last bits.
_PROBE = ("import jax, numpy as np; from tests.test_train_step import golden_fused_run; "
          "print(repr(float(golden_fused_run(('cort_no_ramp',))[1])))")


def candidate_isas() -> list[str]:
  """Instruction sets below this CPU's, nearest first: what another machine's XLA compiles for."""
  try:
    flags = open("/proc/cpuinfo").read()
  except OSError:  # not Linux
    flags = ""
  if "avx512f" in flags:
    return ["AVX2", "AVX", "SSE4_2"]
  if "avx2" in flags:
    return ["AVX", "SSE4_2"]
  return ["SSE4_2"]


def _env(isa: str | None, cache=None) -> dict:
  """The subprocess's env: `isa`'s XLA flags and no compilation cache of this run's; with
  `cache`, a fresh one of its own (the numerics tests compile many programs twice)."""
  env = {k: v for k, v in os.environ.items()
         if not k.startswith(("PYTEST_", "JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE"))}
  # compile everything afresh under the other ISA (into `cache` where one is given)
  env.update(compile_cache_env(cache) if cache is not None else {"JAX_COMPILATION_CACHE_DIR": ""})
  env["XLA_FLAGS"] = xla_flags(8) + (f" --xla_cpu_max_isa={isa}" if isa else "")
  env.update(JAX_PLATFORMS="cpu", HF_HUB_OFFLINE="1", PYTHONPATH=ROOT)
  return env


def _probe(isa: str | None) -> float:
  r = subprocess.run([sys.executable, "-c", _PROBE], env=_env(isa), cwd=ROOT, timeout=600,
                     capture_output=True, text=True)
  assert r.returncode == 0, r.stderr[-3000:]
  return float(r.stdout.strip().splitlines()[-1])


def _isa_or_skip() -> tuple[str, float, float]:
  """(the nearest lower ISA whose golden train step differs from this CPU's in the last bits,
  native Σ|params|, its Σ|params|); skips the test when none does."""
  native = _probe(None)
  for isa in candidate_isas():
    other = _probe(isa)
    if other != native:
      return isa, native, other
  pytest.skip(f"none of --xla_cpu_max_isa={candidate_isas()} changes this CPU's float32 "
              "train step")


@pytest.mark.slow
def test_numerics_tests_pass_under_another_instruction_set(tmp_path):
  """First, the setting the rerun uses does change float32 results on this machine (else the
  rerun would prove nothing): the golden train step's Σ|params| moves in the last bits (seen
  on an AVX-512 machine: 5.9e-8 relative under AVX2, 1.9e-8 under AVX). Then the rerun."""
  isa, native, other = _isa_or_skip()
  np.testing.assert_allclose(other, native, rtol=1e-6)  # the same computation
  assert other != native
  cmd = [sys.executable, "-m", "pytest", "-q", "-m", "numerics", "-p", "no:cacheprovider",
         "-p", "no:xdist", *RERUN]
  r = subprocess.run(cmd, env=_env(isa, tmp_path / "jit_cache"), cwd=ROOT,
                     capture_output=True, text=True, timeout=1800)
  tail = (r.stdout + r.stderr)[-6000:]
  assert r.returncode == 0, f"XLA_FLAGS=--xla_cpu_max_isa={isa}: {' '.join(cmd)}\n{tail}"
  assert " passed" in r.stdout and " failed" not in r.stdout, tail
