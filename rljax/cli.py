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


def one_line(e: BaseException, limit: int = 1000) -> str:
  """An exception as one line: rljax's own errors as their message (it names the file, line
  or key), others prefixed with their type; whitespace runs collapsed, at most `limit` chars."""
  msg = " ".join(str(e).split())
  if not type(e).__module__.startswith("rljax") or not msg:
    msg = f"{type(e).__name__}: {msg}" if msg else type(e).__name__
  return msg if len(msg) <= limit else msg[:limit - 1] + "…"


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


# gloo prints "[Gloo] Rank 3 is connected to 7 peer ranks. Expected number of connected peer
# ranks is : 7" once per device, from one thread each, piece by piece: the pieces of several
# ranks can interleave within and across lines
GLOO_PIECES = (b"[Gloo] Rank ", b" is connected to ", b" peer ranks. ",
               b"Expected number of connected peer ranks is : ")


def _gloo_pieces(s: bytes, partial: bool) -> bool:
  """Whether `s` is made of gloo's message pieces (and numbers) only; with `partial`, the
  last piece may be unfinished."""
  i, word = 0, False
  while i < len(s):
    if s[i:i + 1].isdigit():
      while i < len(s) and s[i:i + 1].isdigit():
        i += 1
      continue
    for piece in GLOO_PIECES:
      if s.startswith(piece, i):
        i, word = i + len(piece), True
        break
      if partial and piece.startswith(s[i:]):
        return True
    else:
      return False
  return word or (partial and not s)


class NativeStdoutFilter:
  """Drops the lines native code prints straight to file descriptor 1 that are made of
  gloo's connection message (`[Gloo] Rank 0 is connected to 1 peer ranks...`, one per device,
  no switch to turn them off): fd 1 becomes a pipe that a thread copies to the real stdout,
  line by line, less those lines. Everything else, Python's prints included, passes in order;
  a partial line (a progress bar's `\r` update) passes at once unless it could still be gloo's.
  `close()` (also at exit) restores fd 1 and forwards what is left."""

  def __init__(self):
    import threading
    sys.stdout.flush()
    self._out = os.dup(1)
    r, w = os.pipe()
    os.dup2(w, 1)
    os.close(w)
    self._r, self._broken, self._closed = r, False, False
    self._thread = threading.Thread(target=self._pump, name="rljax-stdout-filter", daemon=True)
    self._thread.start()
    import atexit
    atexit.register(self.close)

  def _write(self, data: bytes) -> None:
    while data and not self._broken:  # a closed reader: keep draining, never block the run
      try:
        data = data[os.write(self._out, data):]
      except OSError:
        self._broken = True

  def _pump(self) -> None:
    buf = b""
    while True:
      chunk = os.read(self._r, 1 << 16)
      if not chunk:
        break
      *lines, buf = (buf + chunk).split(b"\n")
      out = b"".join(line + b"\n" for line in lines if not _gloo_pieces(line, False))
      if buf and not _gloo_pieces(buf, True):
        out, buf = out + buf, b""
      self._write(out)
    if buf and not _gloo_pieces(buf, False):
      self._write(buf)
    os.close(self._r)

  def close(self) -> None:
    if self._closed:
      return
    self._closed = True
    sys.stdout.flush()
    os.dup2(self._out, 1)  # the pipe's last write end closes: the thread sees EOF
    self._thread.join(timeout=10)
    os.close(self._out)


_STDOUT_FILTER: list[NativeStdoutFilter] = []


def drop_gloo_lines() -> None:
  """Installs one `NativeStdoutFilter` for the process (a no-op the second time)."""
  if not _STDOUT_FILTER:
    _STDOUT_FILTER.append(NativeStdoutFilter())


def restore_stdout() -> None:
  """Undoes `drop_gloo_lines` (before an `os._exit`, which skips atexit)."""
  while _STDOUT_FILTER:
    _STDOUT_FILTER.pop().close()


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
