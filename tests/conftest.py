"""Test setup: 8 fake CPU devices and fast compiles (TEST_COMPILE_FLAGS), set before JAX starts."""
import os

import pytest

from tests.trainer.helpers import TEST_COMPILE_FLAGS

_FLAG = "--xla_force_host_platform_device_count=8"
for _f in (_FLAG,) + TEST_COMPILE_FLAGS:  # unless XLA_FLAGS sets them already
  if _f.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _f).strip()
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One persistent compilation cache per test run, shared by the test workers and the trainer
# subprocesses they start: most tests are compile-bound and many compile the same tiny
# programs (the `:tiny` update, sampler and eval). A cache key covers the program, the
# compile options and XLA_FLAGS, so a run under another instruction set
# (tests/test_portability.py, whose subprocess has a cache of its own) never reads these
# executables.
# Fresh for each run and removed after it: JAX writes an entry in place (not atomically),
# and a worker that read a stale half-written entry, left in a cache kept across runs by a
# killed process, crashed deserializing it (a segfault).
_CACHE_ROOT = None  # the cache this process made (the controller, or a run without xdist)
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:  # xdist workers inherit the controller's
  import tempfile as _tempfile
  _CACHE_ROOT = _tempfile.mkdtemp(prefix="rljax_tests_jit_cache_")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE_ROOT
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")


def pytest_unconfigure(config):
  """The run's compilation cache goes with the run (removed by the process that made it)."""
  if _CACHE_ROOT:
    import shutil
    shutil.rmtree(_CACHE_ROOT, ignore_errors=True)

# Hypothesis: CI (CI=true, set by the CI runner) replays the same derandomized examples on
# every run, so a red CI is never luck; locally the search is wider and random. Examples it
# falsifies are added as explicit regression cases (tests/objectives/test_properties.py).
try:
  from hypothesis import HealthCheck, settings as _hyp_settings
except ImportError:  # pragma: no cover - optional dependency
  _hyp_settings = None
if _hyp_settings is not None:
  _hyp_settings.register_profile("ci", derandomize=True, database=None, max_examples=10,
                                 deadline=None, print_blob=True,
                                 suppress_health_check=[HealthCheck.too_slow])
  _hyp_settings.register_profile("dev", max_examples=50, deadline=None, print_blob=True,
                                 suppress_health_check=[HealthCheck.too_slow])
  _ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
  _hyp_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if _ci else "dev"))


# The longest tests first (minutes each on 2 cores): with `-n 2` the other worker runs the
# short ones meanwhile, instead of one worker finishing alone on a long test at the end.
_HEAVY_FIRST = ("tests/test_portability.py::test_numerics_tests_pass_under_another",
                "tests/experiments/test_run_all.py::test_run_all_quick",
                "tests/trainer/test_resume.py::test_sigkill_then_rerun",
                "tests/test_aot.py::test_a_paper_config",
                "tests/trainer/test_multiprocess.py::",
                "tests/trainer/test_lora.py::test_lora_loop",
                "tests/trainer/test_async.py::test_disaggregated_k1",
                "tests/test_device_bench.py::")


def pytest_collection_modifyitems(config, items):
  def rank(item):
    nodeid = item.nodeid
    return next((i for i, p in enumerate(_HEAVY_FIRST) if nodeid.startswith(p)),
                len(_HEAVY_FIRST))
  items.sort(key=rank)  # stable: the rest keep their order


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
  """After each test module, JAX's in-memory caches of traced and compiled programs go: an
  xdist worker runs ~400 tests and kept every program it compiled (7-11 GB of RSS late in a
  full run). Measured on tests/trainer/test_loop.py, tests/test_packing.py and
  tests/rollout/test_sampler.py in one process: peak RSS 2.91 -> 2.63 GB, 566 -> 541 s (a
  later module's programs still load from the run's persistent cache)."""
  yield
  import gc

  import jax
  jax.clear_caches()
  gc.collect()
