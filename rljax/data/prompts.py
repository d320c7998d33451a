"""Your own prompts (JSONL) and the math tasks as training data with x+ / x- twins.

A JSONL line is one prompt:

    {"prompt": "Write a haiku about rain.", "prompt_minus": "Write a haiku about rain.",
     "instruction_id_list": [...], "kwargs": [...], "answer": ..., ...}

- `prompt` and `prompt_minus`: x+ is `prompt` as given, x- (the rubric-free replay
  prompt CoRT needs) is `prompt_minus`.
- `prompt` with `instruction_id_list` + `kwargs` (IFEval schema, any registered
  verifier) and no `prompt_minus`: `prompt` is the request; the criteria text is
  rendered from the ids and kwargs (the phrasings of the built-in rubric set), x+ is
  the request followed by the criteria, x- is the request alone.
- Any other fields are kept for the reward (`answer` for math_accuracy, anything a
  custom reward reads). The csr / aon rewards need `instruction_id_list` + `kwargs`.

Files are prepared once per content hash into array_record files through a TFDS
builder (`build_prompts`) and read without TensorFlow. Every bad line raises an
error naming the file and line.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
from typing import Any

import numpy as np
import tensorflow_datasets as tfds

from rljax.data import criteria, rubric
from rljax.data.tfds_builders import FILE_FORMAT, _VERSION, _Builder, _prepare
from rljax.rewards import jsonl, verifier


def _where_error(where: str, msg: str) -> jsonl.RecordError:
  return jsonl.RecordError(f"{where}: {msg}", "missing_field")


def prepare_record(obj: Any, where: str) -> dict[str, Any]:
  """One JSONL record -> a training example with prompt_plus / prompt_minus."""
  if not isinstance(obj, dict):
    raise jsonl.RecordError(f"{where}: a record must be a JSON object, got "
                            f"{type(obj).__name__}", "not_an_object")
  if not isinstance(obj.get("prompt"), str) or not obj["prompt"].strip():
    raise _where_error(where, f"needs a non-empty string 'prompt'; the record has {sorted(obj)}")
  ex = dict(obj)
  has_ids = "instruction_id_list" in obj
  if has_ids:
    try:
      ex["kwargs"] = verifier.validate_instructions(obj["instruction_id_list"],
                                                    obj.get("kwargs"))
    except ValueError as e:
      raise jsonl.RecordError(f"{where}: {e}", "bad_kwargs") from e
    ex["instruction_id_list"] = list(obj["instruction_id_list"])
  if "prompt_minus" in obj:
    if not isinstance(obj["prompt_minus"], str):
      raise _where_error(where, "'prompt_minus' must be a string")
    ex["prompt_plus"], ex["prompt_minus"] = obj["prompt"], obj["prompt_minus"]
  elif has_ids:
    missing = [i for i in ex["instruction_id_list"] if i not in criteria.registry.names(
        criteria.KIND)]
    if missing:
      raise _where_error(where, f"no criterion phrasing for {missing}; give 'prompt_minus' "
                         "(x-) and put the criteria in 'prompt' yourself")
    rng = random.Random(f"rljax-prompts:{obj['prompt']}")
    built = rubric.build_example(obj["prompt"], list(zip(ex["instruction_id_list"],
                                                         ex["kwargs"])), rng)
    ex.update({k: built[k] for k in ("prompt_plus", "prompt_minus", "criteria_text",
                                     "criteria_spans")})
  else:
    raise _where_error(where, "needs 'prompt_minus' (x-) or 'instruction_id_list' + 'kwargs' "
                       f"(criteria to render); the record has {sorted(obj)}")
  return ex


def read_prompts(path: str) -> list[dict[str, Any]]:
  """All examples of a prompts JSONL file; errors name the file and line."""
  out = []
  for lineno, line in jsonl.iter_lines(path):
    if isinstance(line, str) and not line.strip():
      continue
    where = f"{path}:{lineno}"
    text = jsonl._text(line)
    try:
      obj = json.loads(text)
    except json.JSONDecodeError as e:
      raise jsonl.RecordError(f"{where}: malformed JSON: {e.msg} (column {e.colno})",
                              "malformed_json") from e
    ex = prepare_record(obj, where)
    ex.setdefault("id", f"{os.path.basename(path)}:{lineno}")
    out.append(ex)
  if not out:
    raise ValueError(f"{path}: no records (the file is empty)")
  return out


def math_example(ex: dict[str, Any]) -> dict[str, Any]:
  """A math task with its question as x+ and x- (no rubric: replay equals the policy)."""
  return {**ex, "prompt_plus": ex["question"], "prompt_minus": ex["question"]}


@dataclasses.dataclass(eq=False)
class PromptsConfig(tfds.core.BuilderConfig):
  path: str = ""


class RljaxPrompts(_Builder):
  """A prompts JSONL file (see the module docstring), one example per line, as JSON."""
  VERSION = _VERSION
  BUILDER_CONFIGS = [PromptsConfig(name="unset")]

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
        "example": tfds.features.Text()}))

  def _split_generators(self, dl_manager):
    if not self.builder_config.path:
      raise ValueError("rljax_prompts needs a config with `path`; use build_prompts()")
    return {"train": self._generate_examples()}

  def _generate_examples(self):
    for i, ex in enumerate(read_prompts(self.builder_config.path)):
      yield i, {"example": json.dumps(ex)}


def build_prompts(path: str, data_dir: str) -> tfds.core.DatasetBuilder:
  """Builds (once per file content) the array_record dataset of a prompts JSONL file."""
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path}: no such prompts file (config data.path)")
  with open(path, "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()[:12]
  stem = "".join(ch if ch.isalnum() else "_" for ch in os.path.basename(path).split(".")[0])
  config = PromptsConfig(name=f"{stem}_{digest}", path=os.path.abspath(path))
  return _prepare(RljaxPrompts(config=config, data_dir=data_dir, file_format=FILE_FORMAT))


def decode_example(record: dict[str, Any]) -> dict[str, Any]:
  value = record["example"]
  if isinstance(value, np.ndarray):
    value = value.item()
  return json.loads(value.decode("utf-8") if isinstance(value, bytes) else value)
