"""Opening SmolLM2-135M's GGUF: rljax's reader against the `gguf` package's GGUFReader.

    python bench/model_load.py [--rounds 5]

Times, best of `--rounds` (each from a fresh parse, no cache): `read_gguf` and
`gguf.GGUFReader` on the bundled file (metadata and tensor views), the tokenizer rebuilt from
the parsed metadata, and `load_model` (config, dequantized float32 weights, tokenizer-free).
Writes bench/results/model_load.json.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from bench.common import best_time, report  # noqa: E402


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--rounds", type=int, default=5)
  a = ap.parse_args()
  import gguf

  from rljax.models import load_model
  from rljax.models import gguf_file
  from rljax.models.bundled import smollm2_path
  from rljax.models.tokenizer import gguf_tokenizer
  path = smollm2_path()

  def fresh(fn):
    def call():
      gguf_file._cached.cache_clear()
      fn()
    return call
  t_ours = best_time(fresh(lambda: gguf_file.read_gguf(path)), a.rounds)
  t_ref = best_time(lambda: gguf.GGUFReader(path), a.rounds)
  t_tok = best_time(fresh(lambda: gguf_tokenizer(path)), a.rounds)
  t_load = best_time(fresh(lambda: load_model(path)), max(1, a.rounds // 2))
  rows = [{"what": "gguf.GGUFReader(path)", "s": t_ref, "vs rljax": t_ref / t_ours},
          {"what": "rljax read_gguf(path)", "s": t_ours, "vs rljax": 1.0},
          {"what": "gguf_tokenizer(path) (read + build)", "s": t_tok},
          {"what": "load_model(path) (read + dequantize)", "s": t_load}]
  report("model_load", ["what", "s", "vs rljax"], rows,
         {"file": os.path.basename(path), "bytes": os.path.getsize(path), "rounds": a.rounds,
          "loadavg": os.getloadavg()})


if __name__ == "__main__":
  main()
