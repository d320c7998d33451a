"""The golden and equivalence tests (marked `numerics`) hold on another CPU.

XLA:CPU orders float32 sums by the processor it compiles for (vector width, GEMM blocking),
so a test's float results move in the last bits from one CPU model to the next. A tolerance
taken from one machine's output (`rtol=1e-9` on a float32 sum) passes there and fails on the
next. This test reruns every `numerics` test in a subprocess compiled for another instruction
set (`--xla_cpu_max_isa`: AVX2 on an AVX-512 machine, else AVX), which reorders those sums
on this very machine (vector widths, and so the order of float32 arithmetic, follow the ISA),
so such a tolerance fails here, before it lands.

By hand: `XLA_FLAGS=--xla_cpu_max_isa=AVX2 python -m pytest -m numerics tests`.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Σ|params| after the golden fused train step of tests/test_train_step.py (float64 sum of
# the float32 params): where another ISA orders the step's float32 arithmetic differently,
# this moves in the last bits.
_PROBE = ("import jax, numpy as np; from tests.test_train_step import golden_fused_run; "
          "print(repr(float(golden_fused_run(('cort_no_ramp',))[1])))")


def other_isa() -> str:
  """An instruction set below this CPU's: what another machine's XLA would compile for."""
  try:
    flags = open("/proc/cpuinfo").read()
  except OSError:  # not Linux: assume an AVX2 machine
    flags = "avx2"
  return "AVX2" if "avx512f" in flags else "AVX"


def _env(isa: str | None) -> dict:
  env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
  flags = "--xla_force_host_platform_device_count=8"
  env["XLA_FLAGS"] = flags + (f" --xla_cpu_max_isa={isa}" if isa else "")
  env.update(JAX_PLATFORMS="cpu", HF_HUB_OFFLINE="1", PYTHONPATH=ROOT)
  return env


def test_the_other_instruction_set_changes_float32_results_here():
  """The setting the numerics run uses does change float32 results on this machine (else
  the run below would prove nothing): the golden train step's Σ|params| moves in the last
  bits (seen: by 5.9e-8 relative under AVX2 on an AVX-512 machine, 1.9e-8 under AVX)."""
  sums = []
  for isa in (None, other_isa()):
    r = subprocess.run([sys.executable, "-c", _PROBE], env=_env(isa), cwd=ROOT, timeout=600,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    sums.append(float(r.stdout.strip().splitlines()[-1]))
  native, other = sums
  np.testing.assert_allclose(other, native, rtol=1e-6)  # the same computation
  assert other != native, (f"--xla_cpu_max_isa={other_isa()} gave a bit-identical train step "
                           "on this CPU")


@pytest.mark.slow
def test_numerics_tests_pass_under_another_instruction_set():
  cmd = [sys.executable, "-m", "pytest", "-q", "-m", "numerics", "-p", "no:cacheprovider",
         "-p", "no:xdist", "tests"]
  r = subprocess.run(cmd, env=_env(other_isa()), cwd=ROOT, capture_output=True, text=True,
                     timeout=1800)
  tail = (r.stdout + r.stderr)[-6000:]
  assert r.returncode == 0, f"XLA_FLAGS=--xla_cpu_max_isa={other_isa()}: {' '.join(cmd)}\n{tail}"
  assert " passed" in r.stdout and " failed" not in r.stdout, tail
