"""Shared by the subprocess trainer tests."""


def compile_cache_env(cache) -> dict:
  """Env for a JAX persistent compilation cache in `cache`: every program is stored, so a
  later run (a resume, the other process) loads the same executables instead of compiling."""
  return {"JAX_COMPILATION_CACHE_DIR": str(cache),
          "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
          "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"}
