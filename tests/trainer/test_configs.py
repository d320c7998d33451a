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
         "sc", "tis", "mis", "tis_sc", "bpo", "seq_mis", "geo_rs", "seq_is_rs", "bypass_ppo"]


@pytest.mark.parametrize("name", NAMES)
def test_config_validates_and_sweeps(name):
  path = os.path.join(ROOT, "configs", f"{name}.py")
  mod = load_config_module(path)
  for arg in (None, "tiny"):
    validate_config(mod.get_config(arg), num_devices=8)
  validate_config(mod.get_config("cpu"), num_devices=1)
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
      "objective.transform_kwargs": {}, "train.inner_epochs": 2,
      "train.truncate_logprobs": False}, "REINFORCE"),
    ({"objective.loss": "gspo_token", "objective.transforms": ("tis_seq_geo",),
      "objective.transform_kwargs": {}}, "gspo"),
    # runs that would compile and learn nothing
    ({"rollout.num_generations": 1, "data.batch_size": 8},
     "num_generations: 1: advantage 'grpo' is group-relative.*every gradient is 0"),
    ({"rollout.temperature": 0.0, "objective.transforms": ("tis",),
      "objective.transform_kwargs": {}},
     "temperature: 0 \\(greedy\\) with transform 'tis', which reads the sampler's prob"),
    ({"rollout.temperature": 0.0, "objective.loss": "topk_sc", "objective.transforms": (),
      "rollout.record_topk": 8, "objective.transform_kwargs": {}}, "with loss 'topk_sc'"),
    ({"rollout.temperature": 0.0}, "samples of a group identical"),
    ({"train.num_minibatches": 4, "data.batch_size": 16, "rollout.num_generations": 4,
      "mesh.shape": (8, 1, 1)}, "mini-batch of 4 rows must split over 8 data-parallel"),
    ({"objective.replay_policy": "frozen"}, "replay_policy.*valid: old, ref"),
    ({"objective.replay_mode": "each"}, "replay_mode.*valid: all, per_criterion"),
    ({"objective.transform_kwargs": {"cort": {"ramp_steps": 1.5}}}, "fraction of train.steps"),
    ({"train.max_consecutive_skips": -1}, "max_consecutive_skips"),
    # placement and staleness
    ({"rollout.placement": "remote"}, "placement.*valid: colocated, disaggregated"),
    ({"rollout.max_staleness": 1}, "max_staleness: 1 needs rollout.placement=disaggregated"),
    ({"rollout.placement": "disaggregated", "rollout.num_devices": 8},
     "num_devices: 8: disaggregated needs 1 <= num_devices < the 8 devices"),
    ({"rollout.placement": "disaggregated", "rollout.num_devices": 4, "rollout.lag": 1},
     "lag: is the colocated schedule"),
    ({"rollout.placement": "disaggregated", "rollout.num_devices": 2, "mesh.shape": (1, 8, 1)},
     "does not match the 6 available devices .the trainer's, after rollout.num_devices"),
    ({"rollout.lag": -1}, "rollout.lag: must be an int >= 0"),
    ({"rollout.num_devices": 2}, "num_devices: and rollout.mesh_shape need rollout.placement"),
    # rollout correction (the :tiny base scores the sampler's top-32 truncation)
    ({"objective.loss": "topk_sc", "objective.transforms": (), "rollout.record_topk": 8,
      "objective.transform_kwargs": {}, "train.inner_epochs": 1, "train.num_minibatches": 1},
     "truncate_logprobs: loss 'topk_sc' centers the score .* log p = -inf"),
    ({"train.old_policy": "cached"}, "old_policy.*valid: decoupled, bypass"),
    ({"train.old_policy": "bypass", "objective.transforms": ("tis",),
      "objective.transform_kwargs": {}}, "bypass makes π_old the sampler's q"),
    ({"train.old_policy": "bypass", "objective.transforms": ("rej_seq_geo",),
      "objective.transform_kwargs": {}}, "bypass at μ > 1 skips the π_old forward"),
    ({"train.old_policy": "bypass", "objective.loss": "pg", "objective.transforms": (),
      "objective.transform_kwargs": {}, "train.inner_epochs": 1, "train.num_minibatches": 1},
     "never reads π_old"),
    ({"objective.transforms": ("rej",), "objective.loss": "real",
      "objective.transform_kwargs": {}}, "classifies whole groups"),
    ({"objective.transforms": ("oracle_credit",), "objective.transform_kwargs": {}},
     "transforms: \\['oracle_credit'\\] read ground-truth token labels"),
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


def test_configs_default_to_the_papers_settings():
  """CoRT seed: 64 prompts × 8, lr 1e-6, clip 0.2/0.27, ≥ 4 updates per rollout batch; the
  ramp is a fraction of the run (it finishes); DAPO 0.2/0.28; GSPO 3e-4/4e-4; :tiny keeps μ>1."""
  from rljax.config_check import objective_kwargs
  from rljax.objectives import build_objective
  get = lambda n, a=None: load_config_module(os.path.join(ROOT, "configs", f"{n}.py")) \
      .get_config(a)
  c = get("cort_grpo")
  assert c.data.batch_size == 512 and c.rollout.num_generations == 8 and c.optim.lr == 1e-6
  assert c.train.inner_epochs * c.train.num_minibatches >= 4
  k = dict(objective_kwargs(c)["transform_kwargs"]["cort"])["ramp_steps"]
  assert k <= c.train.steps  # λ reaches 1 within the run
  clip = lambda n: (lambda o: (o.loss_cfg.eps_low, o.loss_cfg.eps_high))(
      build_objective(**objective_kwargs(get(n))))
  assert clip("cort_grpo") == clip("grpo") == (0.2, 0.27)
  assert clip("dapo") == (0.2, 0.28) and clip("gspo") == (3e-4, 4e-4)
  for n in ("grpo", "dapo", "gspo", "real", "cort_grpo"):
    t = get(n, "tiny").train
    assert t.inner_epochs * t.num_minibatches > 1, n


def test_every_paper_row_has_a_pod_config():
  """Study 6: each row of the CoRT paper's tables is a valid pod config with the row's
  model, reward and objective (GSPO + CoRT on token-level GSPO; DAPO with dynamic sampling
  and the overlong cache at a quarter of the response length)."""
  from configs import pod
  chips = {"qwen3_4b": 8, "qwen2_5_7b": 16, "qwen3_14b": 32}
  assert len(pod.PAPER_ROWS) == 14
  for model, reward, objective, cort, paper in pod.PAPER_ROWS:
    c = pod.get_config(pod.row_arg(model, reward, objective, cort))
    validate_config(c, num_devices=chips[model])
    assert c.model.path == f"configs/models/{model}" and c.reward.name == reward
    assert c.objective.transforms == (("cort",) if cort else ())
    assert c.objective.loss == {"grpo": "grpo", "dapo": "dapo",
                                "gspo": "gspo_token" if cort else "gspo"}[objective]
    assert c.objective.dynamic_sampling == (objective == "dapo")
    assert c.objective.overlong_cache == (512 if objective == "dapo" else 0)
    assert (c.train.inner_epochs * c.train.num_minibatches, c.optim.lr) == (4, 1e-6)
    assert cort or not any("Δ" in k for k in paper)  # gains are reported on the CoRT rows
  with pytest.raises(ValueError, match="unknown pod objective"):
    pod.get_config("objective=ppo")


def test_workdir_guard_protects_results_only(tmp_path):
  """A workdir is "a different run" only once it holds a result: a run that failed before
  its first metrics (a wrong model path, say) leaves a config.json that must not block the
  corrected command. A key the config no longer has (objective.teacher) is the same run."""
  import json
  from rljax.workdir import WorkdirError, check_compatible, config_dict
  cfg = load_config_module(os.path.join(ROOT, "configs", "cort_grpo.py")).get_config("tiny")
  wd = tmp_path / "run"
  wd.mkdir()
  saved = config_dict(cfg)
  saved["objective"]["loss"] = "dapo"
  (wd / "config.json").write_text(json.dumps(saved))
  assert check_compatible(cfg, str(wd)) == []  # no results yet: the new config replaces it
  (wd / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 0.0}) + "\n")
  with pytest.raises(WorkdirError, match="objective.loss"):
    check_compatible(cfg, str(wd))
  old = config_dict(cfg)
  old["objective"]["teacher"] = ""  # written by an earlier version of the config
  (wd / "config.json").write_text(json.dumps(old))
  assert check_compatible(cfg, str(wd)) == []
  # a config.json from before rollout.lag / max_staleness existed ran on-policy: the same run;
  # another staleness is another run; another placement is the same run on other devices
  for k in ("lag", "max_staleness", "placement", "num_devices", "mesh_shape"):
    del old["rollout"][k]
  (wd / "config.json").write_text(json.dumps(old))
  assert check_compatible(cfg, str(wd)) == []
  cfg.rollout.lag = 1
  with pytest.raises(WorkdirError, match="rollout.lag: 0 -> 1"):
    check_compatible(cfg, str(wd))
  cfg.rollout.lag, cfg.rollout.placement, cfg.rollout.num_devices = 0, "disaggregated", 4
  assert check_compatible(cfg, str(wd)) == []  # like mesh.shape: no warning either


def test_ramp_fraction_one_ends_below_one_and_a_shorter_one_reaches_it():
  """The comment in configs/common.py: with S steps the last update is S − 1, so ramp_steps
  = 1.0 ends at λ = SmoothStep((S − 1)/S) < 1 and f ≤ (S − 1)/S reaches λ = 1."""
  from rljax.config_check import resolve_ramp
  from rljax.objectives import CortConfig, cort_lambda
  steps = 8
  for f, reaches in ((1.0, False), ((steps - 1) / steps, True), (0.5, True)):
    k = resolve_ramp({"ramp_steps": f}, steps)["ramp_steps"]
    lam = float(cort_lambda(steps - 1, CortConfig(ramp_steps=k)))
    assert (lam == 1.0) == reaches, (f, lam)
  assert float(cort_lambda(steps - 1, CortConfig(ramp_steps=steps))) < 1.0


def test_tiny_with_a_model_path_says_the_weights_are_not_loaded():
  cfg = load_config_module(os.path.join(ROOT, "configs", "cort_grpo.py")).get_config("tiny")
  assert not any("not loaded" in w for w in validate_config(cfg, num_devices=8))
  cfg.model.path = os.path.join(ROOT, "configs", "models", "qwen3_4b")
  warns = validate_config(cfg, num_devices=8)
  assert any("random 2-layer model" in w and "are not loaded" in w for w in warns), warns
