#!/usr/bin/env bash
# Prepares what bench/device/run.py needs on the GPU machine, whose image has JAX with the
# CUDA plugin, flax, optax, orbax, transformers and torch but no network:
#   .whl/                         the wheels rljax needs that the image lacks (Python 3.12)
#   .device/smollm2_tokenizer/    SmolLM2's tokenizer as a directory (from the bundled GGUF)
# Both are git-ignored; name them in the device call's `carry` (bench/device/README.md).
# Run from the repository root with the venv of the README active.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .whl .device
plat=(--only-binary=:all: --python-version 3.12 --implementation cp --platform any
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
      --platform manylinux1_x86_64)
# runtime requirements missing from the image, and their own missing requirements
python3 -m pip download -q --no-deps "${plat[@]}" -d .whl \
  ml_collections==1.1.0 gguf==0.19.0 tensorflow-datasets==4.9.10 array_record==0.8.6 \
  tensorboardX==2.6.5 nltk==3.10.4 syllapy==0.8.0 emoji==2.16.0 qwix==0.1.8 \
  dm-tree==0.1.10 immutabledict==4.3.1 simple-parsing==0.1.9 docstring_parser==0.18.0 \
  tensorflow-metadata==1.21.0 googleapis-common-protos==1.76.0 termcolor==3.3.0 \
  toml==0.10.2 defusedxml==0.7.1
# pure-Python packages published only as source: built here into universal wheels
python3 -m pip wheel -q --no-deps -w .whl langdetect==1.0.9 promise==2.3
python3 - <<'PY'
from rljax.models.bundled import resolve
from rljax.models.tokenizer import load_tokenizer
tok = load_tokenizer(resolve("smollm2"))
tok.save_pretrained(".device/smollm2_tokenizer")
print("tokenizer:", len(tok), "tokens -> .device/smollm2_tokenizer")
PY
du -sh .whl .device
