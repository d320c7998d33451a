"""Shared by the subprocess trainer tests (and tests/conftest.py: the optimization level)."""
import os

# XLA:CPU's backend at -O0 (LLVM's optimization level): the suite compiles hundreds of small
# programs and runs most of them a few times, so compiling dominates. Measured on the 2-core
# box: a 261-test subset (objectives, rollout correction, trainer configs and bad input, the
# CLI) took 338 s at the default level and 255 s at -O0; a SmolLM2 generation test (runtime-
# bound) and `run_all --quick` were no slower. The matmuls are library calls either way; a
# test's float results move in the last bits, which its tolerance covers (as on another CPU).
TEST_OPT_LEVEL = "--xla_backend_optimization_level=0"


def xla_flags(devices: int = 8) -> str:
  """XLA_FLAGS of a trainer subprocess a test starts: `devices` fake CPU devices, compiled at
  the optimization level of the test process (TEST_OPT_LEVEL unless XLA_FLAGS names one)."""
  level = [f for f in os.environ.get("XLA_FLAGS", "").split()
           if f.startswith("--xla_backend_optimization_level=")] or [TEST_OPT_LEVEL]
  return f"--xla_force_host_platform_device_count={devices} {level[-1]}"


def compile_cache_env(cache) -> dict:
  """Env for a JAX persistent compilation cache in `cache`: every program is stored, so a
  later run (a resume, the other process) loads the same executables instead of compiling."""
  return {"JAX_COMPILATION_CACHE_DIR": str(cache),
          "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
          "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"}
