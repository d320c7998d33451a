"""The RL loop on the :tiny config: learning, μ > 1 path, metrics, plots, sweeps."""
import json
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from configs import cort_grpo  # noqa: E402
from rljax.metrics_log import read_metrics  # noqa: E402
from rljax.trainer import Trainer  # noqa: E402


def _run(tmp_path, name="run", cfg=None, **over):
  cfg = cfg or cort_grpo.get_config("tiny")
  for k, v in over.items():
    node = cfg
    *path, leaf = k.split(".")
    for p in path:
      node = node[p]
    node[leaf] = v
  cfg.data.data_dir = str(tmp_path / "tfds")
  wd = str(tmp_path / name)
  return Trainer(cfg, wd).run(), wd


def test_csr_rises_on_tiny_config(tmp_path):
  final, wd = _run(tmp_path, **{"train.steps": 16, "checkpoint.every": 0})
  csr = [r["reward/csr"] for r in read_metrics(wd)]
  assert len(csr) == 16
  first, last = np.mean(csr[:5]), np.mean(csr[-5:])
  assert last > first + 0.2, (first, last, csr)
  for key in ("actor/grad_norm", "response/length_clip_ratio", "transform/cort/weight_mean",
              "actor/entropy", "loss/ppo/clip_frac", "mismatch/abs_log_ratio_mean",
              "time/rollout_and_reward", "time/train", "eval/prompt_level_strict"):
    assert key in final, key
  assert os.path.exists(os.path.join(wd, "config.json"))
  assert os.listdir(os.path.join(wd, "checkpoints", "last")) == ["16"]


def test_multi_update_with_per_criterion_ref_replay(tmp_path):
  """:tiny runs μ = 4 updates per rollout batch: the clip acts (non-zero clip fraction); the
  replay is scored by the frozen reference, one row per criterion, Δ_j logged per id."""
  final, wd = _run(tmp_path, **{"train.steps": 2, "checkpoint.every": 0,
                                "objective.replay_policy": "ref",
                                "objective.replay_mode": "per_criterion"})
  assert final["actor/num_skipped"] == 0 and np.isfinite(final["loss"])
  assert final["actor/num_updates"] == 4 and final["actor/approx_kl"] > 0
  assert max(r["loss/ppo/clip_frac"] for r in read_metrics(wd)) > 0
  assert "transform/cort/weight_mean" in final
  assert np.isfinite(final["cort/delta/change_case:english_lowercase"])
  assert final["transform/cort/lambda"] == 1.0  # ramp_steps = 0.5 of the run: finished


def test_plot_and_sweep_print(tmp_path, capsys):
  from rljax import plot, sweep
  _, wd = _run(tmp_path, **{"train.steps": 2, "checkpoint.every": 0})
  paths = plot.plot_runs([wd], str(tmp_path / "plots"))
  assert all(os.path.getsize(p) > 1000 for p in paths)
  capsys.readouterr()
  sweep.main(["--config", os.path.join(ROOT, "configs/cort_grpo.py:tiny"), "--print_only",
              "--workdir", str(tmp_path / "sw")])
  lines = capsys.readouterr().out.strip().splitlines()
  assert len(lines) == 4 and all("python -m rljax.sweep" in l and f"--index={i}" in l
                                  for i, l in enumerate(lines))


@pytest.mark.parametrize("name", ["dapo", "tis_sc", "geo_rs", "bypass_ppo"])
def test_other_objectives_run(tmp_path, name):
  """DAPO (dynamic sampling + overlong shaping), TIS+top-k SC, geometric rejection + veto and
  bypass PPO (2 updates, no π_old forward) with a W8A8+int4-KV sampler."""
  from rljax.sweep import load_config_module
  cfg = load_config_module(os.path.join(ROOT, "configs", f"{name}.py")).get_config("tiny")
  final, wd = _run(tmp_path, cfg=cfg, **{"train.steps": 2, "checkpoint.every": 0})
  assert np.isfinite(final["loss"]) and final["actor/num_skipped"] == 0
  if name == "dapo":
    assert "reward/overlong_penalty" in final and "rollout/resample_tries" in final
  else:
    assert final["mismatch/abs_log_ratio_mean"] > 0  # the quantized sampler differs
  if name == "geo_rs":
    assert 0 <= final["transform/rej_seq_geo/frac_seqs_rejected"] <= 1
    assert final["actor/tokens_in_loss"] > 0 and "adv/num_in_baseline" in final
  if name == "bypass_ppo":
    assert final["actor/num_updates"] == 2 and final["mismatch/chi2"] >= 0


def test_prompt_bucketing_is_exact(tmp_path):
  """data.prompt_bucket pads x+ / x- (and the per-criterion x-) to the batch's longest
  prompt rounded up to the bucket instead of the maxima: same rollouts, same updates."""
  over = {"train.steps": 2, "checkpoint.every": 0, "objective.replay_mode": "per_criterion",
          "data.max_prompt_len": 160, "data.max_replay_prompt_len": 128, "eval.num_prompts": 0}
  _, wd0 = _run(tmp_path, "full", **over, **{"data.prompt_bucket": 0})
  _, wd1 = _run(tmp_path, "bucketed", **over, **{"data.prompt_bucket": 16})
  full, bucketed = read_metrics(wd0), read_metrics(wd1)
  assert [r["rollout/prompt_len"] for r in full] == [160, 160]
  assert all(r["rollout/prompt_len"] < 160 and r["rollout/prompt_len"] % 16 == 0
             for r in bucketed), [r["rollout/prompt_len"] for r in bucketed]
  for a, b in zip(full, bucketed):
    for k in ("reward/csr", "response/length_mean", "loss", "actor/grad_norm",
              "cort/delta_mean", "transform/cort/weight_mean"):
      if k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=2e-4, atol=1e-6, err_msg=k)


def test_packed_run_equals_padded(tmp_path):
  """train.pack (rljax.packing): the per-criterion replay and μ = 1 epoch × 2 mini-batches on
  packed rows of 192 tokens (the rows sent in their mini-batch order, each mini-batch planned
  whole) give the padded run's rollouts, losses and metrics (float32 rounding apart). Two
  epochs (plans per group) are checked in tests/test_packing.py."""
  over = {"train.steps": 2, "checkpoint.every": 0, "objective.replay_mode": "per_criterion",
          "eval.num_prompts": 0, "train.inner_epochs": 1, "train.num_minibatches": 2}
  _, wd0 = _run(tmp_path, "padded", **over)
  _, wd1 = _run(tmp_path, "packed", **over, **{"train.pack": True, "train.tokens_per_row": 192})
  padded, packed = read_metrics(wd0), read_metrics(wd1)
  assert all(0 < r["pack/utilization"] <= 1 for r in packed)
  for a, b in zip(padded, packed):
    for k, v in a.items():
      if isinstance(v, float) and not k.startswith(("time", "timeline", "throughput")):
        np.testing.assert_allclose(b[k], v, rtol=1e-4, atol=1e-5, err_msg=k)


def test_bucket_helpers():
  from rljax.loop import Prompts, Rollouts, bucket_len, common_prompt_lens, left_pad_to, trim_left
  assert [bucket_len(n, 32, 160) for n in (1, 32, 33, 150, 160)] == [32, 32, 64, 160, 160]
  assert bucket_len(40, 0, 160) == 160 and bucket_len(0, 32, 160) == 32
  ids = np.array([[0, 0, 5, 6], [0, 7, 8, 9]])
  (t,) = trim_left((ids,), 3)
  np.testing.assert_array_equal(t, ids[:, 1:])
  np.testing.assert_array_equal(left_pad_to(t, 4), ids)
  import collections
  R = collections.namedtuple("R", "prompt_ids_BxP prompt_mask_BxP")
  mk = lambda p, m: Rollouts(
      r=R(np.ones((2, p)), np.ones((2, p))), rewards=np.zeros(2), info={},
      prompts=Prompts(*(np.ones((1, p)),) * 2, *(np.ones((1, m)),) * 2,
                      *(np.ones((1, 2, p + 1)),) * 2, np.zeros((1, 2))))
  a, b = common_prompt_lens(mk(4, 3), mk(6, 2))
  for d in (a, b):
    assert d.r.prompt_ids_BxP.shape == (2, 6) and d.prompts.plus_mask.shape == (1, 6)
    assert [x.shape for x in d.prompts[2:]] == [(1, 3), (1, 3), (1, 2, 7), (1, 2, 7), (1, 2)]
  assert a.prompts.plus_mask[0, :2].sum() == 0  # zeros: masked left padding


def test_exact_sc_with_the_full_recorded_distribution_trains(tmp_path):
  """rollout.record_topk = -1 records the sampler's whole distribution; exact SC (`sc`)
  needs it. The trainer used to turn -1 into head_k = 0 (no head in the batch)."""
  from configs import sc
  final, wd = _run(tmp_path, cfg=sc.get_config("tiny"),
                   **{"objective.loss": "sc", "rollout.record_topk": -1, "train.steps": 1,
                      "checkpoint.every": 0, "eval.num_prompts": 0})
  assert np.isfinite(final["loss"]) and final["actor/num_skipped"] == 0


def test_token_balanced_minibatches_packed_equal_padded(tmp_path):
  """train.balance_tokens: the groups dealt into mini-batches of about the same tokens on the
  host; packed and padded runs with it make the same updates (same mini-batches, float32
  rounding apart) and log how full the fullest mini-batch is."""
  over = {"train.steps": 2, "checkpoint.every": 0, "eval.num_prompts": 0,
          "train.inner_epochs": 1, "train.num_minibatches": 2, "train.balance_tokens": True}
  _, wd0 = _run(tmp_path, "padded", **over)
  _, wd1 = _run(tmp_path, "packed", **over, **{"train.pack": True, "train.tokens_per_row": 192})
  padded, packed = read_metrics(wd0), read_metrics(wd1)
  for a, b in zip(padded, packed):
    assert a["minibatch/tokens_max_over_mean"] == b["minibatch/tokens_max_over_mean"] >= 1
    for k, v in a.items():
      if isinstance(v, float) and not k.startswith(("time", "timeline", "throughput")):
        np.testing.assert_allclose(b[k], v, rtol=1e-4, atol=1e-5, err_msg=k)


def test_token_balance_needs_one_epoch_of_minibatches(tmp_path):
  from rljax.config_check import ConfigError
  with pytest.raises(ConfigError, match="train.balance_tokens"):
    _run(tmp_path, "bad", **{"train.balance_tokens": True, "train.num_minibatches": 1,
                             "train.inner_epochs": 1})
