"""`python -m rljax.export WORKDIR OUT [--step N] [--best] [--peft]`: a run's policy as a
Hugging Face directory (model.safetensors + config.json + tokenizer files +
generation_config.json) that `transformers.AutoModelForCausalLM.from_pretrained(OUT)` and
`AutoTokenizer.from_pretrained(OUT)` load, offline.

The weights are the trainer's params at the newest readable checkpoint of
WORKDIR (or `--step`, or the best one by held-out accuracy with `--best`); the
architecture and tokenizer come from WORKDIR/config.json. A LoRA run's checkpoint holds
its adapters: they are merged into the base (`model.path`; a QLoRA base is rounded to its
integer grid first, as it trained), or, with `--peft`, written as a PEFT adapter directory
(adapter_config.json + adapter_model.safetensors) for the base model.
"""
from __future__ import annotations

import json
import os
import sys

import ml_collections as mlc


def run_config(workdir: str) -> mlc.ConfigDict:
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path}: not a run directory (no config.json)")
  from rljax.models.files import read_json
  return mlc.ConfigDict(read_json(path))


def template_model(cfg: mlc.ConfigDict):
  """(model with the run's architecture, tokenizer) — the weights are replaced after."""
  from rljax.models import create_model, load_model
  from rljax.models.bundled import resolve
  from rljax.models.config import ModelConfig
  from rljax.models.tokenizer import load_tokenizer
  c = cfg.model
  tok = load_tokenizer(resolve(c.tokenizer or c.path))
  if c.tiny:
    tiny = c.tiny_config.to_dict()
    mcfg = ModelConfig(vocab_size=len(tok), eos_token_id=tok.eos_token_id,
                       param_dtype=c.param_dtype, dtype=c.dtype, **tiny)
    return create_model(mcfg, seed=cfg.seed), tok  # the run's base, for a LoRA run
  return load_model(resolve(c.path), param_dtype=c.param_dtype, dtype=c.dtype), tok


def restore_params(workdir: str, step: int | None = None, best: bool = False) -> tuple[dict, int]:
  """(the trainer's params as a nested dict of numpy arrays, step) from WORKDIR's checkpoints."""
  import orbax.checkpoint as ocp
  sub = "best" if best else "last"
  directory = os.path.abspath(os.path.join(workdir, "checkpoints", sub))
  if not os.path.isdir(directory):
    raise FileNotFoundError(f"{directory}: no checkpoints")
  mgr = ocp.CheckpointManager(directory, item_names=("state", "meta"))
  steps = sorted(mgr.all_steps(), reverse=True) if step is None else [step]
  if not steps:
    raise FileNotFoundError(f"{directory}: no checkpoint steps")
  errors = []
  import warnings
  warnings.filterwarnings("ignore", message="Sharding info not provided when restoring")
  try:
    for s in steps:
      try:
        out = mgr.restore(s, args=ocp.args.Composite(state=ocp.args.PyTreeRestore()))
        return _params_of(out.state), s
      except Exception as e:  # noqa: BLE001 - try the previous step
        errors.append(f"step {s}: {type(e).__name__}: {str(e)[:120]}")
  finally:
    mgr.close()
  raise FileNotFoundError(f"{directory}: no readable checkpoint ({'; '.join(errors)})")


def _params_of(state) -> dict:
  train = state["train"]
  params = train["params"] if isinstance(train, dict) else train[0]  # TrainState.params
  return params


def export_run(workdir: str, out: str, *, step: int | None = None, best: bool = False,
               peft: bool = False) -> str:
  """Writes OUT (HF directory, or with `peft` a PEFT adapter directory) from a run; returns
  OUT."""
  import jax
  import numpy as np
  from flax import nnx
  from rljax.loop.build import lora_config
  from rljax.models import export_model
  from rljax.models import lora as lora_lib
  cfg = run_config(workdir)
  lora = lora_config(cfg)
  if peft and lora is None:
    raise ValueError(f"{workdir}: --peft needs a LoRA run (config model.lora.rank > 0)")
  model, tok = template_model(cfg)
  params, s = restore_params(workdir, step, best)
  graphdef, state = nnx.split(model)
  template = nnx.to_pure_dict(state)
  if lora is not None:
    want = lora_lib.adapter_shapes(model.cfg, lora)
    _check_tree(workdir, s, want, params)
    if peft:
      lora_lib.export_peft(params, lora, out, base_model=cfg.model.path)
      _write_record(out, workdir, s, best)
      return out
    base = template if not lora.base_bits else jax.jit(
        lambda p: lora_lib.quantize_base(p, lora.base_bits))(template)
    params = jax.jit(lambda b, a: lora_lib.merge(b, a, lora))(base, params)
  _check_tree(workdir, s, template, params)
  nnx.replace_by_pure_dict(state, jax.tree.map(np.asarray, params))
  model = nnx.merge(graphdef, state)
  os.makedirs(out, exist_ok=True)
  export_model(model, out)
  tok.save_pretrained(out)
  with open(os.path.join(out, "generation_config.json"), "w") as f:
    json.dump({"eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id}, f, indent=2)
  _write_record(out, workdir, s, best)
  return out


def _write_record(out: str, workdir: str, step: int, best: bool) -> None:
  with open(os.path.join(out, "rljax_export.json"), "w") as f:
    json.dump({"workdir": os.path.abspath(workdir), "step": step,
               "checkpoint": "best" if best else "last"}, f, indent=2)


def _check_tree(workdir: str, step: int, template, params) -> None:
  """The checkpoint's arrays have the run's names and shapes."""
  import numpy as np
  flat_t, flat_p = dict(_flatten(template)), dict(_flatten(params))
  missing = sorted(set(flat_t) - set(flat_p))
  if missing:
    raise ValueError(f"{workdir}: checkpoint step {step} lacks parameters {missing[:5]}")
  for k, v in flat_t.items():
    if tuple(np.shape(flat_p[k])) != tuple(v.shape):
      raise ValueError(f"{workdir}: checkpoint step {step}: {'/'.join(k)} has shape "
                       f"{np.shape(flat_p[k])}, the run's model {v.shape}")


def _flatten(tree, prefix=()):
  if isinstance(tree, dict):
    for k, v in tree.items():
      yield from _flatten(v, prefix + (str(k),))
  else:
    yield prefix, tree


def main(argv=None) -> int:
  from rljax import cli
  ap = cli.parser("python -m rljax.export", __doc__)
  ap.add_argument("workdir", help="a run directory (config.json + checkpoints/)")
  ap.add_argument("out", help="output Hugging Face directory")
  ap.add_argument("--step", type=int, default=None, help="checkpoint step (default: newest)")
  ap.add_argument("--best", action="store_true", help="the best checkpoint by held-out accuracy")
  ap.add_argument("--peft", action="store_true",
                  help="a LoRA run's adapters as a PEFT adapter directory (default: merged)")
  a = ap.parse_args(argv)
  cli.set_verbosity(a.verbosity)
  os.environ.setdefault("HF_HUB_OFFLINE", "1")
  try:
    out = export_run(a.workdir, a.out, step=a.step, best=a.best, peft=a.peft)
  except (OSError, ValueError) as e:
    ap.exit(2, f"{ap.prog}: error: {e}\n")
  print(out)
  return 0


if __name__ == "__main__":
  sys.exit(main())
