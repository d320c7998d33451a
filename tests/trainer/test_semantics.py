"""The loop's training semantics on :tiny configs without compiling a train step: honest
sampler–trainer mismatch, DAPO dynamic sampling on accuracy, the N-skips abort."""
import os
import sys

import jax
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from rljax.objectives import importance_weights, ISConfig  # noqa: E402
from rljax.rollout import SamplerSync  # noqa: E402
from rljax.rollout.metrics import mismatch_metrics  # noqa: E402
from rljax.sweep import load_config_module  # noqa: E402
from rljax.scoring import response_outputs  # noqa: E402
from rljax.trainer import Trainer, TrainingAborted  # noqa: E402


def _trainer(tmp_path, name, **over):
  cfg = load_config_module(os.path.join(ROOT, "configs", f"{name}.py")).get_config("tiny")
  cfg.data.data_dir = str(tmp_path / "tfds")
  cfg.eval.num_prompts = 0
  for k, v in over.items():
    *path, leaf = k.split(".")
    node = cfg
    for p in path:
      node = node[p]
    node[leaf] = v
  return Trainer(cfg, str(tmp_path / name))


def _scored_batch(tr, copy="none"):
  """One collected batch and the trainer's log p of its tokens, scored as the step scores."""
  tr.sync = SamplerSync(copy, every=1)
  roll = tr.collect(0)
  batch = tr.assemble(roll)
  sc = tr.step_cfg
  logp = jax.jit(lambda p, t, m: response_outputs(tr.model.graphdef, p, t, m, sc.response_len,
                                                  sc)["logp_BxT"])(
      tr.state.params, batch.tokens_BxL, batch.attn_mask_BxL)
  return roll, batch, np.asarray(logp)


def test_tiny_mismatch_config_measures_the_rollout_copy_only(tmp_path):
  """Sampler and trainer use the same (full) distribution: kl_q_p is float noise with no copy
  and clearly positive with a W8A8 + int4-KV copy."""
  tr = _trainer(tmp_path, "tis")
  kl = {}
  for copy in ("none", "w8a8+kv4"):
    _, batch, logp = _scored_batch(tr, copy)
    kl[copy] = float(mismatch_metrics(batch.sampler_logp_BxN, logp, batch.mask_BxN)
                     ["kl_q_p"])
  print("kl_q_p", kl)
  assert kl["none"] < 1e-4 and kl["w8a8+kv4"] > 1e-3, kl


def test_same_truncation_dapo_drops_uninformative_groups_and_skips_abort(tmp_path):
  """dapo:tiny samples and scores the same top-32 distribution: with copy = none every TIS
  weight is 1 and MIS keeps every token (≤ 1e-5). Dynamic sampling reads the accuracy reward:
  with a criterion no 4-token response meets, every group stays uninformative through the
  resampling and is dropped (masked) and counted. Too many skipped updates in a row abort."""
  tr = _trainer(tmp_path, "dapo", **{"data.instruction_ids": ("combination:repeat_prompt",),
                                     "objective.max_resample": 1})
  roll, batch, logp = _scored_batch(tr)
  mask = np.asarray(roll.r.mask_BxN, np.float32)  # the batch's loss mask before the drop
  lb = {"mask_BxT": mask, "old_logp_BxT": logp, "sampler_logp_BxT": batch.sampler_logp_BxN}
  ones = np.ones_like(mask)
  w_tis = np.asarray(importance_weights(ISConfig("tis")).update(ones, lb, ())[0])
  w_mis, _, m_mis = importance_weights(ISConfig("mis")).update(ones, lb, ())
  assert np.abs(w_tis - 1)[mask > 0].max() <= 1e-5
  assert float(m_mis["mis/frac_masked"]) == 0
  assert np.abs(np.asarray(w_mis) - 1)[mask > 0].max() <= 1e-5
  assert (roll.info["accuracy"] == 0).all() and "overlong_penalty" in roll.info
  assert not roll.keep_groups.any() and roll.resample_tries == 1
  assert batch.mask_BxN.sum() == 0 and np.abs(batch.adv_B).sum() == 0
  from rljax.loop import rollout_metrics
  assert rollout_metrics(roll, batch)["rollout/dropped_groups"] == len(roll.keep_groups)
  # the N-skips abort (same trainer): saves the last good state, then raises
  tr.skips.limit = 6  # train.max_consecutive_skips
  all_skipped = {"actor/update_skipped": 4.0, "actor/num_updates": 4.0}
  tr.check_skips(1, dict(all_skipped))
  tr.check_skips(2, {"actor/update_skipped": 1.0, "actor/num_updates": 4.0})  # resets to 1
  tr.check_skips(3, dict(all_skipped))  # 5 in a row
  with pytest.raises(TrainingAborted, match="aborting at step 4: 9 consecutive updates were "
                     "skipped.*max_consecutive_skips=6.*optim.lr.*saved"):
    tr.check_skips(4, dict(all_skipped))
  assert tr.ckpt.latest_step() == 4


def test_the_assembled_batch_has_the_layout_aot_compiles(tmp_path):
  """One `TrainBatch` definition: the batch the trainer assembles (per-criterion CoRT replay
  and a recorded head) has exactly the arrays, dtypes and trailing shapes of the layout that
  `rljax.aot` lowers (`batch_layout`, at the longest prompts), and its prompt columns are the
  bucketed ones."""
  from rljax.loop import batch_layout, layout_of
  tr = _trainer(tmp_path, "cort_grpo", **{"objective.replay_mode": "per_criterion",
                                          "rollout.record_topk": 4})
  batch = tr.assemble(tr.collect(0))
  arrays = batch.arrays()
  got = {k: (v.shape, v.dtype) for k, v in arrays.items()}
  assert got == layout_of(batch).shapes()
  full = batch_layout(tr.cfg, tr.step_cfg).shapes()
  assert set(full) == set(arrays) and {"crit_tokens_BxCxL", "head_ids_BxNxK"} <= set(full)
  for k, (shape, dtype) in full.items():
    assert dtype == arrays[k].dtype and shape[0] == arrays[k].shape[0], k
    assert shape[-1] >= arrays[k].shape[-1], k  # bucketed prompts are at most the maxima
  assert layout_of(batch).prompt_len <= tr.cfg.data.max_prompt_len


def test_a_collapsed_policy_stops_the_run(tmp_path):
  """optim.lr=1e3 on :tiny: from step 2 the logits are uniform (entropy = ln vocab) and the
  gradient is exactly 0 although the advantages are not; the run stops at step 4 with a
  message naming the collapse instead of training a dead model to the end."""
  tr = _trainer(tmp_path, "cort_grpo", **{"optim.lr": 1e3, "train.steps": 8,
                                          "checkpoint.every": 0, "log.plot": False})
  with pytest.raises(TrainingAborted, match=r"aborting at step 4: the policy collapsed: the "
                     r"gradient was exactly 0 for 3 steps in a row \(from step 2\).*entropy "
                     r"10\.80\d nats, ln\(vocab\) = 10\.80\d.*max_collapsed_steps=3.*optim.lr"):
    tr.run()


def test_collapse_guard_counts_only_batches_with_signal():
  from types import SimpleNamespace
  from rljax.loop import CollapseGuard
  g = CollapseGuard(2)
  batch = lambda adv: SimpleNamespace(mask_BxN=np.ones((2, 3)), adv_B=np.asarray(adv))
  zero = {"actor/grad_norm": 0.0}
  assert not g.check(1, dict(zero), batch([0.5, -0.5]))
  assert not g.check(2, dict(zero), batch([0.0, 0.0]))  # equal rewards: no signal, no count
  assert not g.check(3, {"actor/grad_norm": 0.1}, batch([0.5, -0.5]))  # moved: reset
  assert not g.check(4, dict(zero), batch([0.5, -0.5]))
  m = dict(zero)
  assert g.check(5, m, batch([0.5, -0.5])) and m["actor/collapsed_steps"] == 2
  assert g.first == 4
  assert not CollapseGuard(0).check(1, dict(zero), batch([1.0, -1.0]))  # 0: never
