"""Rejection criteria × levels and the group baseline over kept responses, against
independent NumPy references on random (p, q, masks, lengths), incl. all-masked rows and
groups where every response is rejected."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax import registry
from rljax.objectives import AdvantageConfig, build_objective, kept_advantages
from rljax.objectives.rejection import CRITERIA, registered_name

B, T, G = 16, 12, 4


def random_case(seed):
  rng = np.random.RandomState(seed)
  lengths = rng.randint(1, T + 1, B)
  lengths[3] = 0  # an all-masked (empty) response
  mask = (np.arange(T)[None] < lengths[:, None]).astype(np.float32)
  q = np.log(rng.uniform(0.05, 1.0, (B, T))).astype(np.float32)
  scale = rng.choice([0.01, 0.3, 2.0], (B, 1))  # near-on-policy, mismatched, far off
  p = (q + scale * rng.randn(B, T)).astype(np.float32)
  p[5, 2] = q[5, 2] + math.log(1e-6)  # a catastrophic token
  p[8:12] = q[8:12] + 3.0  # a whole group far off: every response rejected by most criteria
  return mask, p, q


def reference_keep(mask, p, q, criterion, level, high=2.0, low=0.0, floor=1e-4, max_kl=0.5):
  """Loops over rows and tokens in float64."""
  keep = np.zeros_like(mask, bool)
  lo = low or 1.0 / high
  for i in range(mask.shape[0]):
    idx = np.flatnonzero(mask[i] > 0)
    if not len(idx):
      continue
    lr = np.clip(p[i, idx].astype(np.float64) - q[i, idx], -20, 20)
    k3 = np.exp(lr) - 1 - lr
    if criterion == "veto":
      ok = np.full(len(idx), np.exp(lr).min() >= floor)
    elif criterion == "ratio" and level == "token":
      ok = (np.exp(lr) >= lo) & (np.exp(lr) <= high)
    elif criterion == "ratio":
      s = lr.sum() if level == "seq_prod" else lr.mean()
      ok = np.full(len(idx), lo <= np.exp(s) <= high)
    elif level == "token":
      ok = k3 <= max_kl
    else:
      ok = np.full(len(idx), (k3.sum() if level == "seq_sum" else k3.mean()) <= max_kl)
    keep[i, idx] = ok
  return keep


CASES = [(c, lvl) for c, levels in CRITERIA.items() for lvl in levels]


@pytest.mark.parametrize("criterion,level", CASES, ids=[f"{c}-{lvl}" for c, lvl in CASES])
@pytest.mark.parametrize("seed", [0, 1])
def test_each_criterion_and_level_matches_numpy(criterion, level, seed):
  mask, p, q = random_case(seed)
  name = registered_name(criterion, level)
  opts = {"ratio": {"high": 1.5}, "veto": {"floor": 1e-3}, "k3": {"max_kl": 0.2}}[criterion]
  obj = build_objective(transforms=(name,), num_generations=G, transform_kwargs={name: opts})
  t = obj.token_transform()
  keep, metrics = jax.jit(t.keep)({"mask_BxT": mask, "old_logp_BxT": p, "sampler_logp_BxT": q})
  want = reference_keep(mask, p, q, criterion, level, **opts)
  np.testing.assert_array_equal(np.asarray(keep), want)
  assert 0 < want.sum() < mask.sum(), "the case must reject some and keep some tokens"
  assert all(np.isfinite(float(v)) for v in metrics.values())
  has = mask.sum(1) > 0
  dropped = has & ~want.any(1)
  np.testing.assert_allclose(float(metrics[f"{name}/frac_seqs_rejected"]),
                             dropped.sum() / has.sum(), atol=1e-6)
  np.testing.assert_allclose(float(metrics[f"{name}/frac_tokens_rejected"]),
                             1 - want.sum() / mask.sum(), atol=1e-6)
  assert float(metrics[f"{name}/num_seqs_rejected"]) == dropped.sum()
  # per length quarter: the same fraction over the responses of that length
  lengths = mask.sum(1)
  for j in range(4):
    sel = has & (np.clip(np.ceil(lengths / (T / 4)) - 1, 0, 3) == j)
    frac = dropped[sel].mean() if sel.any() else 0.0
    np.testing.assert_allclose(float(metrics[f"{name}/frac_seqs_rejected_len{j}"]), frac,
                               atol=1e-6)
  # the update is the identity: rejection chooses tokens, it does not reweight
  adv = np.random.RandomState(seed).randn(B, T).astype(np.float32)
  out, _, _ = t.update(jnp.asarray(adv), {"mask_BxT": mask}, t.init())
  np.testing.assert_array_equal(np.asarray(out), adv)


def test_rejections_compose_as_the_and_of_their_keeps():
  mask, p, q = random_case(2)
  obj = build_objective(transforms=("rej_seq_prod", "rej_veto", "tis"), num_generations=G)
  keep, _ = obj.token_transform().keep({"mask_BxT": mask, "old_logp_BxT": p,
                                        "sampler_logp_BxT": q})
  want = (reference_keep(mask, p, q, "ratio", "seq_prod")
          & reference_keep(mask, p, q, "veto", "seq"))
  np.testing.assert_array_equal(np.asarray(keep), want)


def kept_reference(r, keep, g, estimator, scale="group", eps=1e-4):
  """Per group, the estimator applied to the kept rewards alone (float64); 0 elsewhere."""
  out = np.zeros(len(r))
  kept_all = r[keep]
  for s in range(0, len(r), g):
    idx = [i for i in range(s, s + g) if keep[i]]
    x = r[idx].astype(np.float64)
    if len(idx) < 2 or x.max() == x.min():
      continue
    c = x - x.mean()
    if estimator == "rloo":
      a = c * len(x) / (len(x) - 1)
    elif estimator == "dr_grpo" or scale == "none":
      a = c
    elif scale == "group":
      a = c / (x.std(ddof=1) + eps)
    else:
      a = c / (kept_all.astype(np.float64).std(ddof=1) + eps)
    out[idx] = a
  return out


@pytest.mark.parametrize("estimator,scale", [("grpo", "group"), ("grpo", "batch"),
                                             ("grpo", "none"), ("dr_grpo", "none"),
                                             ("rloo", "none")])
def test_kept_advantages_match_the_estimator_over_the_kept_rows(estimator, scale):
  rng = np.random.RandomState(0)
  r = rng.choice([0.0, 0.25, 0.5, 1.0], 24).astype(np.float32)
  keep = rng.rand(24) > 0.3
  keep[0:4] = False  # a group with nothing kept
  keep[4:8] = [True, False, False, False]  # one kept: no baseline
  r[8:12], keep[8:12] = [1, 1, 0, 0], [True, True, False, False]  # kept rewards equal
  cfg = AdvantageConfig(scale_rewards=scale)
  adv, m = kept_advantages(jnp.asarray(r), jnp.asarray(keep), 4, estimator, cfg)
  np.testing.assert_allclose(np.asarray(adv), kept_reference(r, keep, 4, estimator, scale),
                             rtol=1e-5, atol=1e-6)
  assert not np.asarray(adv)[:12].any()
  assert float(m["adv/num_in_baseline"]) == keep.sum()
  # everything kept: exactly the estimator itself
  full, _ = kept_advantages(jnp.asarray(r), jnp.ones(24, bool), 4, estimator, cfg)
  plain, _ = registry.get("advantage", estimator)(jnp.asarray(r), 4, cfg)
  np.testing.assert_allclose(np.asarray(full), np.asarray(plain), rtol=1e-6, atol=1e-7)


def test_baseline_options_and_refusals():
  assert build_objective(transforms=("rej",), num_generations=G).baseline_over_kept
  obj = build_objective(transforms=("rej",), num_generations=G,
                        transform_kwargs={"rej": {"baseline": "all"}})
  assert obj.rejects and not obj.baseline_over_kept
  with pytest.raises(ValueError, match="disagree on the group baseline"):
    build_objective(transforms=("rej", "rej_veto"), num_generations=G,
                    transform_kwargs={"rej": {"baseline": "all"}})
  with pytest.raises(ValueError, match="classifies whole groups"):
    build_objective(transforms=("rej",), loss="real", num_generations=G)
  with pytest.raises(ValueError, match="low < high"):
    build_objective(transforms=("rej",), num_generations=G,
                    transform_kwargs={"rej": {"high": 0.5}})


@pytest.mark.parametrize("name", ["tis", "mis_seq_geo"])
def test_weight_transforms_report_treated_responses_per_length_quarter(name):
  mask, p, q = random_case(3)
  obj = build_objective(transforms=(name,), num_generations=G)
  t = obj.token_transform()
  _, _, m = t.update(jnp.ones((B, T)), {"mask_BxT": mask, "old_logp_BxT": p,
                                        "sampler_logp_BxT": q}, t.init())
  lr = np.where(mask > 0, p - q, 0.0)
  n = np.maximum(mask.sum(1), 1)
  if name == "tis":
    changed = ((lr > math.log(2.0)) & (mask > 0)).any(1)
  else:
    g = lr.sum(1) / n
    changed = (g < math.log(0.5)) | (g > math.log(5.0))
  what = "truncated" if name == "tis" else "masked"
  lengths, has = mask.sum(1), mask.sum(1) > 0
  assert changed[has].any() and not changed[has].all()
  for j in range(4):
    sel = has & (np.clip(np.ceil(lengths / (T / 4)) - 1, 0, 3) == j)
    np.testing.assert_allclose(float(m[f"{name}/frac_seqs_{what}_len{j}"]),
                               changed[sel].mean() if sel.any() else 0.0, atol=1e-6)
