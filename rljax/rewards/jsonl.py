"""Reading IFEval-format JSONL: one record per line with `prompt`,
`instruction_id_list` and `kwargs` (IFEval, IFBench), optionally `key` and
`response`.

Every problem names the file and line. With `on_invalid="raise"` (default) the
first bad line raises a `RecordError`; with "skip" bad lines are skipped, but
counted by reason in the returned `ReadReport` and logged, never dropped
silently. Blank lines are not records; they are counted too.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import logging
import os
from typing import Any, Iterator

from rljax.rewards import verifier

REASONS = ("malformed_json", "not_an_object", "missing_field", "unknown_instruction",
           "bad_kwargs", "not_utf8")


class RecordError(ValueError):
  """A bad JSONL record; `reason` is one of REASONS, the message has file:line."""

  def __init__(self, message: str, reason: str):
    super().__init__(message)
    self.reason = reason


@dataclasses.dataclass
class ReadReport:
  path: str
  lines: int = 0
  blank_lines: int = 0
  records: int = 0
  skipped: dict[str, int] = dataclasses.field(default_factory=dict)
  skipped_lines: list[int] = dataclasses.field(default_factory=list)

  @property
  def num_skipped(self) -> int:
    return sum(self.skipped.values())

  def as_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)

  def summary(self) -> str:
    return (f"{self.path}: {self.records} records read, {self.num_skipped} skipped "
            f"{dict(self.skipped)} (lines {self.skipped_lines[:20]}), "
            f"{self.blank_lines} blank lines")


def parse_record(obj: Any, where: str, *, require_response: bool = False) -> dict[str, Any]:
  """Validates one decoded record; returns a clean copy or raises RecordError."""
  if not isinstance(obj, dict):
    raise RecordError(f"{where}: a record must be a JSON object, got "
                      f"{type(obj).__name__}", "not_an_object")
  need = ["prompt", "instruction_id_list", "kwargs"] + (["response"] if require_response else [])
  missing = [k for k in need if k not in obj]
  if missing:
    raise RecordError(f"{where}: missing field(s) {missing}; the record has "
                      f"{sorted(obj)}", "missing_field")
  for k in ("prompt",) + (("response",) if require_response else ()):
    if not isinstance(obj[k], str):
      raise RecordError(f"{where}: field {k!r} must be a string, got "
                        f"{type(obj[k]).__name__}", "missing_field")
  ids = obj["instruction_id_list"]
  if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
    raise RecordError(f"{where}: instruction_id_list must be a list of strings, got {ids!r}",
                      "bad_kwargs")
  known = set(verifier.verifier_ids())
  for i in ids:
    if i not in known:
      raise RecordError(f"{where}: unknown instruction id {i!r}; known ids: "
                        f"{', '.join(sorted(known))}", "unknown_instruction")
  try:
    kwargs = verifier.validate_instructions(ids, obj["kwargs"])
  except ValueError as e:
    raise RecordError(f"{where}: {e}", "bad_kwargs") from e
  out = dict(obj)
  out["instruction_id_list"] = list(ids)
  out["kwargs"] = kwargs
  return out


def iter_lines(path: str | os.PathLike) -> Iterator[tuple[int, str | RecordError]]:
  """(line number, text) per line; a line that is not UTF-8 yields a RecordError instead."""
  with open(path, "rb") as f:
    for lineno, raw in enumerate(f, start=1):
      try:
        yield lineno, raw.decode("utf-8")
      except UnicodeDecodeError as e:
        yield lineno, RecordError(f"{path}:{lineno}: not UTF-8 text (byte {e.start} of the "
                                  f"line: {raw[max(e.start - 8, 0):e.start + 8]!r})", "not_utf8")


def _text(line: str | RecordError) -> str:
  if isinstance(line, RecordError):
    raise line
  return line


def read_ifeval_jsonl(path: str | os.PathLike, *, on_invalid: str = "raise",
                      require_response: bool = False
                      ) -> tuple[list[dict[str, Any]], ReadReport]:
  """Records of an IFEval-format JSONL file and a report of what was read/skipped."""
  if on_invalid not in ("raise", "skip"):
    raise ValueError(f"on_invalid must be 'raise' or 'skip', got {on_invalid!r}")
  report = ReadReport(path=str(path))
  skipped: collections.Counter[str] = collections.Counter()
  records = []
  for lineno, line in iter_lines(path):
    report.lines += 1
    if isinstance(line, str) and not line.strip():
      report.blank_lines += 1
      continue
    where = f"{path}:{lineno}"
    try:
      try:
        obj = json.loads(_text(line))
      except json.JSONDecodeError as e:
        raise RecordError(f"{where}: malformed JSON: {e.msg} (column {e.colno})",
                          "malformed_json") from e
      rec = parse_record(obj, where, require_response=require_response)
    except RecordError as e:
      if on_invalid == "raise":
        raise
      skipped[e.reason] += 1
      report.skipped_lines.append(lineno)
      logging.warning("skipping %s", e)
      continue
    rec.setdefault("key", str(lineno))
    rec["key"] = str(rec["key"])
    records.append(rec)
  report.records = len(records)
  report.skipped = dict(skipped)
  if report.num_skipped:
    logging.warning("%s", report.summary())
  if not records:
    raise ValueError(f"{path}: no records ({report.lines} lines, {report.blank_lines} blank, "
                     f"{report.num_skipped} skipped {dict(skipped)})")
  return records, report


def read_responses_jsonl(path: str | os.PathLike) -> dict[str, str]:
  """IFEval's response file format: lines {"prompt": ..., "response": ...} -> {prompt: response}."""
  out = {}
  for lineno, line in iter_lines(path):
    if isinstance(line, str) and not line.strip():
      continue
    where = f"{path}:{lineno}"
    try:
      obj = json.loads(_text(line))
    except json.JSONDecodeError as e:
      raise RecordError(f"{where}: malformed JSON: {e.msg} (column {e.colno})",
                        "malformed_json") from e
    if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str) or \
        not isinstance(obj.get("response"), str):
      raise RecordError(f"{where}: need string fields 'prompt' and 'response'", "missing_field")
    if obj["prompt"] in out:
      raise RecordError(f"{where}: duplicate prompt (first 60 chars: "
                        f"{obj['prompt'][:60]!r})", "missing_field")
    out[obj["prompt"]] = obj["response"]
  if not out:
    raise ValueError(f"{path}: no responses (the file is empty)")
  return out
