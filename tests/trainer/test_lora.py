"""LoRA through the loop (`:tiny,lora=4`): the sampler's first weights are the full model's, the base
stays bit-identical, checkpoints hold the adapters and their optimizer state only, a resumed
run equals an uninterrupted one, and the export merges the adapters or writes them for PEFT."""
import json
import os
import sys

import jax
import numpy as np
import orbax.checkpoint as ocp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from configs import cort_grpo  # noqa: E402
from rljax.models.lora import nbytes  # noqa: E402
from rljax.trainer import Trainer  # noqa: E402


def _cfg(tmp_path, arg="tiny,lora=4", steps=2):
  cfg = cort_grpo.get_config(arg)
  cfg.train.steps = steps
  # CoRT's ramp by update count (a fraction of train.steps would differ between the runs)
  cfg.objective.transform_kwargs = {"cort": {"ramp_steps": 2, "warmup_steps": 0}}
  cfg.eval.num_prompts = 0
  cfg.data.data_dir = str(tmp_path / "tfds")
  return cfg


def _state(wd, step):
  return ocp.StandardCheckpointer().restore(
      os.path.join(wd, "checkpoints", "last", str(step), "state"))["train"]


def test_lora_loop_base_frozen_resume_exact_and_export(tmp_path):
  from rljax.loop import build_model
  lora = Trainer(_cfg(tmp_path), str(tmp_path / "lora"))
  assert lora.step_cfg.lora and lora.model.lora.rank == 4
  # B = 0: the sampler's merged weights are the full model's, bit for bit, in the same
  # plain decoder: the first rollout is the full model's
  plain = build_model(_cfg(tmp_path, "tiny"), lora.mesh)
  assert plain.graphdef == lora.model.sampler_graphdef
  for x, y in zip(jax.tree.leaves(plain.params),
                  jax.tree.leaves(lora.model.policy_params(lora.state.params))):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  base0 = jax.tree.map(np.asarray, lora.model.params)
  lora.run()
  for x, y in zip(jax.tree.leaves(base0), jax.tree.leaves(lora.model.params)):
    np.testing.assert_array_equal(x, np.asarray(y))  # the frozen base, untouched
  # the checkpoint: the adapters and their AdamW moments, not the base
  wd = str(tmp_path / "lora")
  st = _state(wd, 2)
  params = st["params"] if isinstance(st, dict) else st[0]
  assert set(params) == {"wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"}
  assert nbytes(st) < 3.2 * nbytes(params) < nbytes(base0)
  assert float(np.abs(np.asarray(params["wq"]["b"])).max()) > 0  # trained
  # resume: 1 step, then on to 2 in the same workdir == 2 steps straight
  part = str(tmp_path / "part")
  Trainer(_cfg(tmp_path, steps=1), part).run()
  Trainer(_cfg(tmp_path, steps=2), part).run()
  for x, y in zip(jax.tree.leaves(st), jax.tree.leaves(_state(part, 2))):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  # export: merged HF weights = base + (α / r) A B; PEFT directory with the adapters
  from rljax.export import export_run
  from rljax.models import load_model, params_dict
  from rljax.models.lora import merge
  out = export_run(wd, str(tmp_path / "hf"))
  got = params_dict(load_model(out))
  want = merge(base0, params, lora.model.lora)
  for x, y in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-7)
  peft = export_run(wd, str(tmp_path / "peft"), peft=True)
  cfg = json.load(open(os.path.join(peft, "adapter_config.json")))
  assert cfg["r"] == 4 and cfg["lora_alpha"] == 32.0 and "q_proj" in cfg["target_modules"]
