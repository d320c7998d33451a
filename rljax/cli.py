"""One command-line style for every entry point (train, sweep, plot, export, evaluation).

argparse, with big_vision-style configs: `--config FILE[:ARG]` loads
`get_config(ARG)` from FILE, `--config.a.b=VALUE` (or `--config.a.b VALUE`)
overrides one field, typed like the field it replaces; `--print_config` prints
the resolved config and exits; an unknown key is one line naming the closest
valid key. `--verbosity` sets how much orbax / absl / JAX log (default: warnings).
"""
from __future__ import annotations

import argparse
import ast
import difflib
import importlib.util
import logging
import os
import sys
from typing import Any, Sequence

import ml_collections as mlc

VERBOSITY = ("debug", "info", "warning", "error")


class CliError(ValueError):
  """A one-line usage error (unknown key, bad value, missing file)."""


def load_config_module(path: str):
  """The module of a config file (`path` may carry a `:arg`)."""
  file = path.split(":")[0]
  if not os.path.exists(file):
    raise CliError(f"{file}: no such config file")
  spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(file))[0], file)
  mod = importlib.util.module_from_spec(spec)
  sys.path.insert(0, os.getcwd())  # `configs/` next to the checkout
  spec.loader.exec_module(mod)
  return mod


def load_config(path: str) -> mlc.ConfigDict:
  """`get_config(arg)` of `file[:arg]`."""
  mod = load_config_module(path)
  if not hasattr(mod, "get_config"):
    raise CliError(f"{path.split(':')[0]}: the config file has no get_config(arg=None)")
  arg = path.split(":", 1)[1] if ":" in path else None
  return mod.get_config(arg)


def flat_keys(cfg: mlc.ConfigDict, prefix: str = "") -> dict[str, Any]:
  """{"optim.lr": 1e-6, ...}: every leaf of the config by dotted path."""
  out = {}
  for k, v in cfg.items():
    if isinstance(v, mlc.ConfigDict) and len(v):
      out.update(flat_keys(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


SYNONYMS = {"learning_rate": "lr", "num_steps": "steps", "max_steps": "steps",
            "batch": "batch_size", "max_tokens": "max_new_tokens", "group_size": "num_generations",
            "dataset_name": "dataset", "reward_name": "name", "clip_norm": "grad_clip"}


def closest(key: str, valid: Sequence[str]) -> str:
  """' Did you mean ...?' for the nearest valid key, or a hint to list them."""
  section, _, leaf = key.rpartition(".")
  guess = f"{section}.{SYNONYMS[leaf]}" if section and leaf in SYNONYMS else SYNONYMS.get(leaf)
  match = [guess] if guess in valid else difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
  if not match:  # the leaf alone, anywhere: train.lr -> optim.lr
    leaves = {k.rsplit(".", 1)[-1]: k for k in valid}
    m = difflib.get_close_matches(SYNONYMS.get(leaf, leaf), list(leaves), n=1, cutoff=0.6)
    match = [leaves[m[0]]] if m else []
  return f"; did you mean {match[0]!r}?" if match else "; see --help for the valid keys"


def parse_value(text: str, old: Any, key: str) -> Any:
  """`text` typed like the value it replaces (bool / int / float / str / tuple / dict)."""
  try:
    lit = ast.literal_eval(text)
  except (ValueError, SyntaxError):
    lit = text
  try:
    if isinstance(old, bool):
      if text.lower() in ("true", "1", "yes"):
        return True
      if text.lower() in ("false", "0", "no"):
        return False
      raise ValueError
    if isinstance(old, int):
      if isinstance(lit, float) and lit.is_integer():
        return int(lit)
      if isinstance(lit, bool) or not isinstance(lit, int):
        raise ValueError
      return lit
    if isinstance(old, float):
      if isinstance(lit, bool) or not isinstance(lit, (int, float)):
        raise ValueError
      return float(lit)
    if isinstance(old, str):
      return text
    if isinstance(old, (tuple, list)):
      if isinstance(lit, str):
        lit = tuple(p.strip() for p in lit.split(",") if p.strip())
      if not isinstance(lit, (tuple, list)):
        lit = (lit,)
      return tuple(lit)
    if isinstance(old, mlc.ConfigDict):
      if not isinstance(lit, dict):
        raise ValueError
      return lit
  except ValueError:
    raise CliError(f"--config.{key}={text}: expected {type(old).__name__} "
                   f"(the current value is {old!r})") from None
  return lit


def apply_overrides(cfg: mlc.ConfigDict, overrides: Sequence[tuple[str, str]]) -> mlc.ConfigDict:
  """Sets each (dotted key, text) on `cfg`; unknown keys raise CliError with the closest key."""
  for key, text in overrides:
    node = cfg
    parts = key.split(".")
    for i, p in enumerate(parts):
      if not isinstance(node, mlc.ConfigDict) or p not in node:
        raise CliError(f"unknown config key {key!r}{closest(key, list(flat_keys(cfg)))}")
      if i < len(parts) - 1:
        node = node[p]
    node[parts[-1]] = parse_value(text, node[parts[-1]], key)
  return cfg


def split_config_overrides(argv: Sequence[str]) -> tuple[list[str], list[tuple[str, str]]]:
  """(other args, [(key, text)]) from `--config.a.b=v` / `--config.a.b v`."""
  rest, overrides = [], []
  argv = list(argv)
  i = 0
  while i < len(argv):
    a = argv[i]
    if a.startswith("--config."):
      body = a[len("--config."):]
      if "=" in body:
        key, text = body.split("=", 1)
      elif i + 1 < len(argv):
        key, text = body, argv[i + 1]
        i += 1
      else:
        raise CliError(f"{a}: missing a value (--config.KEY=VALUE)")
      overrides.append((key, text))
    else:
      rest.append(a)
    i += 1
  return rest, overrides


class _QuietLibraries(logging.Filter):
  """Drops TFDS's per-build notices ("Using custom data configuration ...") below ERROR."""

  def filter(self, record: logging.LogRecord) -> bool:
    return record.levelno >= logging.ERROR or "tensorflow_datasets" not in record.pathname


def set_verbosity(level: str = "warning", *, progress_bars: bool | None = None) -> None:
  """Silences absl / orbax / JAX / TFDS INFO chatter unless asked (`--verbosity info`)."""
  num = getattr(logging, level.upper())
  logging.getLogger().setLevel(num)
  for name in ("absl", "orbax", "jax", "etils", "tensorflow_datasets", "tensorflow"):
    logging.getLogger(name).setLevel(num)
  absl = logging.getLogger("absl")
  for f in [f for f in absl.filters if isinstance(f, _QuietLibraries)]:
    absl.removeFilter(f)
  if num > logging.INFO:
    absl.addFilter(_QuietLibraries())
  try:
    from absl import logging as absl_logging
    absl_logging.set_verbosity(level)
  except ImportError:  # pragma: no cover
    pass
  os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0" if num <= logging.INFO else "2"
  if progress_bars is False or (progress_bars is None and num > logging.INFO
                                and "tensorflow_datasets" in sys.modules):
    import tensorflow_datasets as tfds
    tfds.disable_progress_bar()


def parser(prog: str, doc: str, *, config: bool = False) -> argparse.ArgumentParser:
  """An ArgumentParser with the shared options (--config, --print_config, --verbosity)."""
  ap = argparse.ArgumentParser(prog=prog, description=doc,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  if config:
    ap.add_argument("--config", required=True, help="config file[:arg], e.g. "
                    "configs/cort_grpo.py:tiny; then --config.KEY=VALUE overrides a field")
    ap.add_argument("--print_config", action="store_true",
                    help="print the resolved config (after overrides) and exit")
  ap.add_argument("--verbosity", default="warning", choices=VERBOSITY,
                  help="log level of absl / orbax / JAX messages (default: warning)")
  return ap


def parse_with_config(ap: argparse.ArgumentParser, argv: Sequence[str] | None):
  """(args, resolved config); `--help` with a --config lists the config's keys."""
  argv = list(sys.argv[1:] if argv is None else argv)
  try:
    rest, overrides = split_config_overrides(argv)
  except CliError as e:
    ap.error(str(e))
  if any(a in ("-h", "--help") for a in rest):
    path = _config_arg(rest)
    if path:
      try:
        keys = flat_keys(load_config(path))
        ap.epilog = "config keys (--config.KEY=VALUE) and values:\n" + "\n".join(
            f"  {k} = {v!r}" for k, v in keys.items())
      except Exception as e:  # noqa: BLE001 - help must still print
        ap.epilog = f"(could not load {path}: {e})"
  args = ap.parse_args(rest)
  set_verbosity(args.verbosity)
  try:
    cfg = apply_overrides(load_config(args.config), overrides)
  except CliError as e:
    ap.exit(2, f"{ap.prog}: error: {e}\n")
  if args.print_config:
    print(cfg)
    ap.exit(0)
  return args, cfg


def _config_arg(argv: Sequence[str]) -> str | None:
  for i, a in enumerate(argv):
    if a.startswith("--config="):
      return a.split("=", 1)[1]
    if a == "--config" and i + 1 < len(argv):
      return argv[i + 1]
  return None
