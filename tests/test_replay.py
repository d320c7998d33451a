"""CoRT replay (rljax.replay): per-criterion Δ_j, old vs ref scoring policy, full distribution."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.scoring import response_outputs
from rljax.train_step import score_batch
from tests.test_train_step import N, P, make_batch, setup

# golden / equivalence tests on float results: also run under another XLA:CPU ISA
# (tests/test_portability.py)
pytestmark = pytest.mark.numerics

NUM_IDS = 5


def _crit_batch(b=4, c=2, seed=0):
  """make_batch plus per-criterion rows: x⁺ with a different span of prompt tokens removed per
  slot (left-padded back to P), criterion ids with −1 for an empty slot."""
  batch = make_batch(b, seed)
  rng = np.random.RandomState(seed)
  plus, pmask = batch["tokens_BxL"][:, :P], batch["attn_mask_BxL"][:, :P]
  resp, rmask = batch["tokens_BxL"][:, P:], batch["attn_mask_BxL"][:, P:]
  toks = np.zeros((b, c, P + N), np.int32)
  masks = np.zeros((b, c, P + N), np.int32)
  for i in range(b):
    kept = plus[i][pmask[i] > 0]
    for j in range(c):
      start = 1 + 2 * j
      row = np.concatenate([kept[:start], kept[start + 2:]])  # criterion j = 2 tokens
      toks[i, j, P - len(row):P], masks[i, j, P - len(row):P] = row, 1
      toks[i, j, P:], masks[i, j, P:] = resp[i], rmask[i]
  batch["crit_tokens_BxCxL"], batch["crit_attn_mask_BxCxL"] = toks, masks
  batch["crit_id_BxC"] = np.array([[3, 1], [1, -1], [0, 3], [3, -1]], np.int32)[:b]
  return batch


def test_per_criterion_delta_is_the_direct_two_prompt_difference():
  graphdef, params, _, sc, _ = setup(("cort_no_ramp",))
  sc = dataclasses.replace(sc, replay_mode="per_criterion", num_criteria_ids=NUM_IDS)
  batch = _crit_batch()
  scores = jax.jit(lambda p, b: score_batch(graphdef, p, b, sc))(params, batch)
  one = jax.jit(lambda t, m: response_outputs(graphdef, params, t, m, N, sc)["logp_BxT"])
  want: dict = {}
  total = np.zeros((4, N), np.float32)
  for i in range(4):
    plus = np.asarray(one(batch["tokens_BxL"][i:i + 1], batch["attn_mask_BxL"][i:i + 1]))[0]
    for j in range(2):
      cid = batch["crit_id_BxC"][i, j]
      if cid < 0:
        continue
      minus = np.asarray(one(batch["crit_tokens_BxCxL"][i, j][None],
                             batch["crit_attn_mask_BxCxL"][i, j][None]))[0]
      m = batch["mask_BxN"][i]
      want.setdefault(int(cid), []).append(((plus - minus) * m).sum() / m.sum())
      total[i] += (plus - minus) * m
  sums, counts = np.asarray(scores["crit_delta_sum_I"]), np.asarray(scores["crit_count_I"])
  assert counts.tolist() == [len(want.get(k, [])) for k in range(NUM_IDS)]
  for k, deltas in want.items():
    np.testing.assert_allclose(sums[k] / counts[k], np.mean(deltas), atol=2e-6)
  assert max(abs(np.mean(d)) for d in want.values()) > 1e-3  # removing text changes log p
  # the token credit of the transform is Σ_j Δ_j
  got = (np.asarray(scores["plus_logp_BxN"]) - np.asarray(scores["minus_logp_BxN"]))
  np.testing.assert_allclose(got * batch["mask_BxN"], total, atol=2e-6)


def test_ref_and_old_replay_agree_at_start_and_differ_once_params_moved():
  graphdef, params, _, sc, _ = setup(("cort_no_ramp",), top_k=2)  # truncated trainer scoring
  batch = make_batch(4)
  moved = jax.tree.map(lambda x: x + 0.05 * jax.random.normal(jax.random.key(1), x.shape),
                       params)
  score = lambda policy: jax.jit(lambda p, r: score_batch(
      graphdef, p, batch, dataclasses.replace(sc, replay_policy=policy), r))
  old_fn, ref_fn = score("old"), score("ref")
  m = batch["mask_BxN"] > 0
  start_old, start_ref = old_fn(params, params), ref_fn(params, params)
  for k in ("plus_logp_BxN", "minus_logp_BxN"):
    np.testing.assert_array_equal(np.asarray(start_old[k]), np.asarray(start_ref[k]))
  old, ref = old_fn(moved, params), ref_fn(moved, params)
  for k in ("plus_logp_BxN", "minus_logp_BxN"):
    np.testing.assert_array_equal(np.asarray(ref[k]), np.asarray(start_ref[k]))  # frozen
    assert np.abs(np.asarray(old[k]) - np.asarray(ref[k]))[m].max() > 1e-3
  # replay is scored on the full distribution: finite where the truncated π_old is −inf
  assert not np.isfinite(np.asarray(old["old_logp_BxN"])[m]).all()
  for k in ("plus_logp_BxN", "minus_logp_BxN"):
    assert np.isfinite(np.asarray(old[k])[m]).all()
