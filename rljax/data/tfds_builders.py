"""TFDS builders (array_record, no TensorFlow needed) for rljax's prompt datasets.

  rljax_rubric        rubric prompts with x+/x- twins   splits: train, heldout
  rljax_math          arithmetic + countdown tasks       splits: train, heldout
  rljax_ifeval_jsonl  a user IFEval-format JSONL file    split:  train

Build with `build_rubric(data_dir, ...)`, `build_math(...)`, `build_jsonl(path,
data_dir)`; read with `data_source(builder_or_dir, split)` (random access,
`tfds.data_source` machinery, plain numpy/bytes records) and `decode_record`.
Structured fields that TFDS cannot type (the IFEval kwargs dicts) are stored as
JSON text. Records skipped while reading a JSONL file (on_invalid="skip") are
counted in the builder's `info.metadata["read_report"]` and logged.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any

import numpy as np
import tensorflow_datasets as tfds
from etils import epath

from rljax.data import math_tasks, rubric
from rljax.rewards import jsonl

FILE_FORMAT = "array_record"
_VERSION = tfds.core.Version("1.0.0")
_T = tfds.features.Text


class _Builder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """Base: the code path is this file (TFDS would otherwise probe package
  resources through `importlib_resources`, which this environment lacks)."""
  code_path = epath.Path(__file__)


@dataclasses.dataclass(eq=False)
class RubricConfig(tfds.core.BuilderConfig):
  seed: int = 0
  num_train: int = 4096
  num_heldout: int = 512
  min_criteria: int = 1
  max_criteria: int = 4
  instruction_ids: tuple[str, ...] | None = None  # None: every registered criterion


class RljaxRubric(_Builder):
  """Rubric prompts (rljax.data.rubric) with per-criterion spans."""
  VERSION = _VERSION
  BUILDER_CONFIGS = [RubricConfig(name="default")]

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
        "id": _T(), "split": _T(), "kind": _T(), "base_request": _T(),
        "instruction_id_list": tfds.features.Sequence(_T()), "kwargs": _T(),
        "criteria_text": tfds.features.Sequence(_T()),
        "criteria_spans": tfds.features.Tensor(shape=(None, 2), dtype=np.int32),
        "prompt_plus": _T(), "prompt_minus": _T()}), metadata=tfds.core.MetadataDict())

  def _split_generators(self, dl_manager):
    c = self.builder_config
    return {"train": self._generate_examples("train", c.num_train),
            "heldout": self._generate_examples("heldout", c.num_heldout)}

  def _generate_examples(self, split, num):
    c = self.builder_config
    for ex in rubric.generate_examples(c.seed, split, num, min_criteria=c.min_criteria,
                                       max_criteria=c.max_criteria, ids=c.instruction_ids):
      yield ex["id"], {**ex, "kwargs": json.dumps(ex["kwargs"]),
                       "criteria_spans": np.asarray(ex["criteria_spans"], np.int32)}


@dataclasses.dataclass(eq=False)
class MathConfig(tfds.core.BuilderConfig):
  seed: int = 0
  num_train: int = 4096
  num_heldout: int = 512


class RljaxMath(_Builder):
  """Synthetic arithmetic and countdown tasks (rljax.data.math_tasks)."""
  VERSION = _VERSION
  BUILDER_CONFIGS = [MathConfig(name="default")]

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
        "id": _T(), "split": _T(), "task": _T(), "question": _T(), "answer": _T(),
        "numbers": tfds.features.Tensor(shape=(None,), dtype=np.int64),
        "target": np.int64}))

  def _split_generators(self, dl_manager):
    c = self.builder_config
    return {"train": self._generate_examples("train", c.num_train),
            "heldout": self._generate_examples("heldout", c.num_heldout)}

  def _generate_examples(self, split, num):
    for ex in math_tasks.generate_math(self.builder_config.seed, split, num):
      yield ex["id"], {**ex, "numbers": np.asarray(ex["numbers"], np.int64)}


@dataclasses.dataclass(eq=False)
class JsonlConfig(tfds.core.BuilderConfig):
  path: str = ""
  on_invalid: str = "raise"


class RljaxIfevalJsonl(_Builder):
  """A user's IFEval-format JSONL file (prompt, instruction_id_list, kwargs[, response])."""
  VERSION = _VERSION
  BUILDER_CONFIGS = [JsonlConfig(name="unset")]

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
        "key": _T(), "prompt": _T(), "instruction_id_list": tfds.features.Sequence(_T()),
        "kwargs": _T(), "response": _T(), "has_response": np.bool_}),
        metadata=tfds.core.MetadataDict())

  def _split_generators(self, dl_manager):
    if not self.builder_config.path:
      raise ValueError("rljax_ifeval_jsonl needs a config with `path`; use build_jsonl()")
    return {"train": self._generate_examples()}

  def _generate_examples(self):
    c = self.builder_config
    records, report = jsonl.read_ifeval_jsonl(c.path, on_invalid=c.on_invalid)
    self.info.metadata["read_report"] = report.as_dict()
    seen = set()
    for rec in records:
      if rec["key"] in seen:
        raise ValueError(f"{c.path}: duplicate key {rec['key']!r}")
      seen.add(rec["key"])
      yield rec["key"], {"key": rec["key"], "prompt": rec["prompt"],
                         "instruction_id_list": rec["instruction_id_list"],
                         "kwargs": json.dumps(rec["kwargs"]),
                         "response": rec.get("response", "") or "",
                         "has_response": "response" in rec}


# --- building and reading -----------------------------------------------------------


def _prepare(builder: tfds.core.DatasetBuilder) -> tfds.core.DatasetBuilder:
  """Builds the dataset once. TFDS prints "Downloading and preparing dataset Unknown size
  ..." and "... downloaded and prepared" to stdout itself: shown only at `--verbosity info`
  or lower, like its logging."""
  import contextlib
  import logging
  quiet = logging.getLogger("tensorflow_datasets").getEffectiveLevel() > logging.INFO
  with open(os.devnull, "w") as null, (contextlib.redirect_stdout(null) if quiet
                                       else contextlib.nullcontext()):
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(try_download_gcs=False))
  return builder


def build_rubric(data_dir: str, *, seed: int = 0, num_train: int = 4096, num_heldout: int = 512,
                 min_criteria: int = 1, max_criteria: int = 4,
                 instruction_ids=None) -> tfds.core.DatasetBuilder:
  """`instruction_ids`: restrict the criteria to these IFEval ids (None: all)."""
  ids = tuple(sorted(instruction_ids)) if instruction_ids else None
  name = f"s{seed}_n{num_train}_{num_heldout}_k{min_criteria}to{max_criteria}"
  if ids:
    import hashlib
    name += "_ids" + hashlib.sha1(",".join(ids).encode()).hexdigest()[:8]
  config = RubricConfig(name=name, seed=seed, num_train=num_train, num_heldout=num_heldout,
                        min_criteria=min_criteria, max_criteria=max_criteria,
                        instruction_ids=ids)
  return _prepare(RljaxRubric(config=config, data_dir=data_dir, file_format=FILE_FORMAT))


def build_math(data_dir: str, *, seed: int = 0, num_train: int = 4096,
               num_heldout: int = 512) -> tfds.core.DatasetBuilder:
  config = MathConfig(name=f"s{seed}_n{num_train}_{num_heldout}", seed=seed,
                      num_train=num_train, num_heldout=num_heldout)
  return _prepare(RljaxMath(config=config, data_dir=data_dir, file_format=FILE_FORMAT))


def build_jsonl(path: str, data_dir: str, *, on_invalid: str = "raise"
                ) -> tfds.core.DatasetBuilder:
  """Builds (once per file content) the dataset of an IFEval-format JSONL file."""
  with open(path, "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()[:12]
  stem = "".join(ch if ch.isalnum() else "_" for ch in os.path.basename(path).split(".")[0])
  config = JsonlConfig(name=f"{stem}_{digest}_{on_invalid}", path=os.path.abspath(path),
                       on_invalid=on_invalid)
  return _prepare(RljaxIfevalJsonl(config=config, data_dir=data_dir, file_format=FILE_FORMAT))


def data_source(builder_or_dir: Any, split: str):
  """Random-access source (len, []) over a built split; a directory needs no builder code."""
  if isinstance(builder_or_dir, (str, os.PathLike)):
    builder_or_dir = tfds.builder_from_directory(builder_or_dir)
  return builder_or_dir.as_data_source(split=split)


def _plain(value: Any) -> Any:
  if isinstance(value, bytes):
    return value.decode("utf-8")
  if isinstance(value, np.ndarray):
    if value.dtype.kind in "SO":
      return [_plain(v) for v in value.tolist()]
    return value.tolist()
  if isinstance(value, list):
    return [_plain(v) for v in value]
  if isinstance(value, np.generic):
    return value.item()
  return value


def decode_record(record: dict[str, Any]) -> dict[str, Any]:
  """A TFDS record as plain Python: str, lists, ints; `kwargs` parsed from JSON."""
  out = {k: _plain(v) for k, v in record.items()}
  if isinstance(out.get("kwargs"), str):
    out["kwargs"] = json.loads(out["kwargs"])
  return out
