"""Shared by the subprocess trainer tests (and tests/conftest.py: TEST_COMPILE_FLAGS)."""
import os

# How the tests compile (XLA:CPU): the suite compiles hundreds of small programs and runs most
# of them a few times, so compiling dominates.
# - the backend at -O0 (LLVM's optimization level). Measured on the 2-core box: a 261-test
#   subset (objectives, rollout correction, trainer configs and bad input, the CLI) took 338 s
#   at the default level and 255 s at -O0; a SmolLM2 generation test (runtime-bound) and
#   `run_all --quick` were no slower.
# - the classic elemental emitters for fusions instead of the MLIR fusion emitters: a cold
#   2-step `:tiny` CoRT run compiled its 68 programs in 8.6-9.5 s instead of 13-18 s (its
#   fused train step 4.3-4.9 s instead of 6.4-8.8 s), with the same step times.
# The matmuls are library calls either way; a test's float results move in the last bits,
# which its tolerance covers (as on another CPU).
TEST_COMPILE_FLAGS = ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false")


def compile_flags_for(xla_flags_env: str) -> list[str]:
  """TEST_COMPILE_FLAGS, each unless `xla_flags_env` (an XLA_FLAGS value) sets it already."""
  given = {f.split("=")[0]: f for f in xla_flags_env.split()}
  return [given.get(f.split("=")[0], f) for f in TEST_COMPILE_FLAGS]


def xla_flags(devices: int = 8) -> str:
  """XLA_FLAGS of a trainer subprocess a test starts: `devices` fake CPU devices, compiled as
  the test process compiles (TEST_COMPILE_FLAGS, or the values XLA_FLAGS gives them)."""
  return " ".join([f"--xla_force_host_platform_device_count={devices}"]
                  + compile_flags_for(os.environ.get("XLA_FLAGS", "")))


def compile_cache_env(cache) -> dict:
  """Env for a JAX persistent compilation cache in `cache`: every program is stored, so a
  later run (a resume, the other process) loads the same executables instead of compiling."""
  return {"JAX_COMPILATION_CACHE_DIR": str(cache),
          "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
          "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"}
