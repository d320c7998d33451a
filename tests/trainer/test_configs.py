"""Every config validates; bad configurations stop with a clear message before compiling."""
import glob
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from rljax.config_check import ConfigError, validate_config  # noqa: E402
from rljax.sweep import expand, load_config_module  # noqa: E402

NAMES = ["grpo", "dr_grpo", "dapo", "gspo", "real", "cort_grpo", "cort_dapo", "cort_gspo",
         "sc", "tis", "mis", "tis_sc", "bpo"]


@pytest.mark.parametrize("name", NAMES)
def test_config_validates_and_sweeps(name):
  path = os.path.join(ROOT, "configs", f"{name}.py")
  mod = load_config_module(path)
  for arg in (None, "tiny"):
    validate_config(mod.get_config(arg), num_devices=8)
  assert expand(path)


def _cfg():
  return load_config_module(os.path.join(ROOT, "configs", "cort_grpo.py")).get_config("tiny")


def _set(cfg, key, value):
  *path, leaf = key.split(".")
  node = cfg
  for p in path:
    node = node[p]
  node[leaf] = value


BAD = [
    ({"data.batch_size": 12, "rollout.num_generations": 8}, "not divisible by the group size"),
    ({"objective.loss": "ppo2"}, "unknown loss 'ppo2'.*grpo"),
    ({"objective.transforms": ("cort", "corrt")}, "unknown transform 'corrt'"),
    ({"objective.advantage": "gae"}, "unknown advantage 'gae'.*rloo"),
    ({"objective.loss": "real", "objective.teacher": "qwen3-8b"}, "teacher"),
    ({"objective.loss": "topk_sc", "objective.transforms": (),
      "objective.transform_kwargs": {}}, "head"),
    ({"mesh.shape": (2, 3, 1)}, "does not match the 8 available devices"),
    ({"model.path": "/nonexistent/ckpt"}, "does not exist"),
    ({"reward.name": "bleu"}, "unknown reward 'bleu'.*csr"),
    ({"rollout.top_p": 1.5}, "top_p"),
    ({"rollout.temperature": -1.0}, "temperature"),
    ({"rollout.num_generations": 0}, "num_generations"),
    ({"train.grad_accum": 3}, "grad_accum"),
    ({"train.num_minibatches": 3}, "num_minibatches"),
    ({"optim.lr": 0.0}, "optim.lr"),
    ({"optim.schedule": "cosine_restarts"}, "schedule"),
    ({"train.steps": 0}, "train.steps"),
    ({"model.param_dtype": "float16"}, "param_dtype"),
    ({"rollout.copy": "w3a3"}, "rollout"),
    ({"rollout.sync_every": 0}, "sync_every"),
    ({"data.dataset": "alpaca"}, "unknown|valid: rubric"),
    ({"data.batch_size": 12, "rollout.num_generations": 4, "mesh.shape": (8, 1, 1)},
     "data-parallel"),
    ({"objective.loss": "topk_sc", "objective.transforms": (), "rollout.record_topk": 8,
      "objective.transform_kwargs": {}, "train.inner_epochs": 2}, "REINFORCE"),
    ({"objective.loss": "gspo_token", "objective.transforms": ("tis_seq_geo",),
      "objective.transform_kwargs": {}}, "gspo"),
]


@pytest.mark.parametrize("over,message", BAD, ids=[m[:24] for _, m in BAD])
def test_bad_config_stops_with_clear_message(over, message):
  cfg = _cfg()
  for k, v in over.items():
    _set(cfg, k, v)
  with pytest.raises(ConfigError, match=message):
    validate_config(cfg, num_devices=8)


def test_cli_reports_bad_config_before_compiling(tmp_path):
  import subprocess
  out = subprocess.run(
      [sys.executable, "-m", "rljax.train", "--config", "configs/cort_grpo.py:tiny",
       "--config.objective.loss=nope", f"--workdir={tmp_path}/w"],
      cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert out.returncode != 0
  assert "unknown loss 'nope'" in out.stderr + out.stdout
  assert not os.path.exists(tmp_path / "w" / "checkpoints")
