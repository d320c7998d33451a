"""Verifier base: one checkable instruction, its kwargs schema, strict and loose checks.

A verifier is registered in `rljax.registry` under kind "verifier" by its
instruction id ("length_constraints:number_words"). Its kwargs follow the
IFEval JSONL schema; `validate` turns them into a clean dict or raises a
ValueError that names the id, the argument and what was expected. Keys whose
value is None are ignored (the HF copies of IFEval fill every key with None).

Strict and loose follow IFEval exactly: strict checks the response as is (an
empty response fails); loose passes if any of 8 variants passes (the response,
without its first line, last line or both, each with and without `*`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from rljax import registry

KIND = "verifier"
MODES = ("strict", "loose")
RELATIONS = ("less than", "at least")


@dataclasses.dataclass(frozen=True)
class Arg:
  """One keyword argument: name, kind ("int" | "str" | "list[str]"), constraints."""
  name: str
  kind: str = "int"
  choices: tuple[str, ...] | None = None
  min_value: int | None = None

  def expects(self) -> str:
    if self.choices is not None:
      shown = self.choices if len(self.choices) <= 8 else self.choices[:8] + ("...",)
      return "one of " + ", ".join(repr(c) for c in shown)
    if self.kind == "int" and self.min_value is not None:
      return f"int >= {self.min_value}"
    return self.kind

  def coerce(self, value: Any, where: str) -> Any:
    """Returns the checked value; raises ValueError saying what was expected."""
    bad = ValueError(f"{where}: kwarg {self.name!r} must be {self.expects()}, "
                     f"got {type(value).__name__} {value!r}")
    if self.kind == "int":
      if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON writers sometimes emit 3.0
      if isinstance(value, bool) or not isinstance(value, int):
        raise bad
      if self.min_value is not None and value < self.min_value:
        raise bad
    elif self.kind == "str":
      if not isinstance(value, str) or not value.strip():
        raise bad
      if self.choices is not None and value not in self.choices:
        raise bad
    elif self.kind == "list[str]":
      if isinstance(value, str) or not isinstance(value, Sequence) or not value:
        raise bad
      if not all(isinstance(v, str) and v.strip() for v in value):
        raise bad
      value = list(value)
    else:  # pragma: no cover - programming error in a verifier definition
      raise TypeError(f"unknown Arg kind {self.kind!r}")
    return value


def loose_variants(response: str) -> list[str]:
  """IFEval's loose-mode variants of a response (order as in IFEval)."""
  lines = response.split("\n")
  first = "\n".join(lines[1:]).strip()
  last = "\n".join(lines[:-1]).strip()
  both = "\n".join(lines[1:-1]).strip()
  plain = [response, first, last, both]
  return [response, response.replace("*", "")] + plain[1:] + [
      v.replace("*", "") for v in plain[1:]]


class Verifier:
  """Subclass, set `id` and `args`, implement `_check`; register with `@register_verifier`.

  >>> @register_verifier
  ... class EndsWithBang(Verifier):
  ...   id = "custom:ends_with_bang"
  ...   def _check(self, response, kw):
  ...     return response.rstrip().endswith("!")
  """
  id: str = ""
  args: tuple[Arg, ...] = ()

  def _check(self, response: str, kw: dict[str, Any]) -> bool:
    """The raw IFEval check on validated kwargs (`check_following`)."""
    raise NotImplementedError

  def _validate_more(self, kw: dict[str, Any]) -> None:
    """Cross-argument checks; raise ValueError."""

  def validate(self, kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """A clean copy of `kwargs`, or ValueError naming what is missing or wrong."""
    if kwargs is None:
      kwargs = {}
    if not isinstance(kwargs, Mapping):
      raise ValueError(f"{self.id}: kwargs must be a dict, got "
                       f"{type(kwargs).__name__} {kwargs!r}")
    given = {k: v for k, v in kwargs.items() if v is not None}
    known = {a.name for a in self.args}
    extra = sorted(set(given) - known)
    if extra:
      accepted = ", ".join(sorted(known)) or "none"
      raise ValueError(f"{self.id}: unexpected kwargs {extra}; accepted: {accepted}")
    out = {}
    for arg in self.args:
      if arg.name not in given:
        schema = ", ".join(f"{a.name}: {a.expects()}" for a in self.args)
        raise ValueError(f"{self.id}: missing kwarg {arg.name!r} (expects {schema})")
      out[arg.name] = arg.coerce(given[arg.name], self.id)
    self._validate_more(out)
    return out

  def check_validated(self, response: str, kw: dict[str, Any], mode: str = "strict") -> bool:
    if not isinstance(response, str):
      raise TypeError(f"{self.id}: response must be str, got {type(response).__name__}")
    if mode == "strict":
      return bool(response.strip()) and bool(self._check(response, kw))
    if mode == "loose":
      return any(v.strip() and self._check(v, kw) for v in loose_variants(response))
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")

  def check(self, response: str, kwargs: Mapping[str, Any] | None = None,
            mode: str = "strict") -> bool:
    """True iff `response` follows this instruction with `kwargs` in `mode`."""
    return self.check_validated(response, self.validate(kwargs), mode)

  def __repr__(self) -> str:
    return f"<verifier {self.id}>"


def register_verifier(cls):
  """Class decorator: instantiates the verifier and registers it under its id."""
  if not cls.id:
    raise ValueError(f"{cls.__name__} needs a non-empty `id`")
  registry.register(KIND, cls.id)(cls())
  return cls


def get_verifier(instruction_id: str) -> Verifier:
  """The verifier for an id; an unknown id raises ValueError listing the known ones."""
  return registry.get(KIND, instruction_id)


def verifier_ids() -> list[str]:
  return registry.names(KIND)


def validate_instructions(instruction_id_list: Sequence[str],
                          kwargs_list: Sequence[Mapping[str, Any] | None] | None
                          ) -> list[dict[str, Any]]:
  """Validates a whole IFEval record's instructions; returns clean kwargs."""
  if isinstance(instruction_id_list, str) or not isinstance(instruction_id_list, Sequence):
    raise ValueError(f"instruction_id_list must be a list of ids, got {instruction_id_list!r}")
  if kwargs_list is None:
    kwargs_list = [{}] * len(instruction_id_list)
  if isinstance(kwargs_list, Mapping) or not isinstance(kwargs_list, Sequence):
    raise ValueError(f"kwargs must be a list of dicts, got {type(kwargs_list).__name__}")
  if len(kwargs_list) != len(instruction_id_list):
    raise ValueError(f"{len(instruction_id_list)} instruction ids but "
                     f"{len(kwargs_list)} kwargs dicts")
  return [get_verifier(i).validate(kw) for i, kw in zip(instruction_id_list, kwargs_list)]


def check_all(response: str, instruction_id_list: Sequence[str],
              kwargs_list: Sequence[Mapping[str, Any] | None] | None,
              mode: str = "strict") -> list[bool]:
  """Per-criterion booleans for one response."""
  clean = validate_instructions(instruction_id_list, kwargs_list)
  return [get_verifier(i).check_validated(response, kw, mode)
          for i, kw in zip(instruction_id_list, clean)]
