"""Packed training rows (rljax.packing) equal the padded batch: the plan rebuilds every
sequence, the decoder's packed forward gives the padded hidden states, and the update's
loss, gradients and metrics agree at float32 rounding (fused μ = 1 with the CoRT replay,
μ > 1, gradient accumulation, the per-criterion replay, the reference KL). The forward's
equivalence is also rerun under another instruction set (`numerics`); the step-level ones
compare two paths compiled on the same machine and are not (they cost minutes there)."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from rljax import packing
from rljax.models import create_model, positions_from_mask
from rljax.scoring import Pack, response_outputs
from rljax.train_step import init_state, jit_train_step
from rljax.update import jit_update_batch
from tests.test_train_step import CFG, G, N, P, PM, setup


def ragged_batch(b=16, seed=0, crit=0):
  """Rows of a left-padded prompt (1..P real tokens) and a response of 1..N tokens."""
  rng = np.random.RandomState(seed)
  v = CFG.vocab_size
  plens = np.repeat(rng.randint(2, P + 1, b // G), G)  # one prompt per group
  rlens = rng.randint(1, N + 1, b)
  plus = rng.randint(0, v, (b, P)).astype(np.int32)
  pmask = (np.arange(P)[None] >= (P - plens)[:, None]).astype(np.int32)
  resp = rng.randint(0, v, (b, N)).astype(np.int32)
  rmask = (np.arange(N)[None] < rlens[:, None]).astype(np.int32)
  minus, mmask = plus[:, P - PM:].copy(), pmask[:, P - PM:].copy()
  mmask[:, -1] = 1  # every x⁻ keeps at least one token
  # ... and differs from x⁺ in its last prompt token: otherwise Δ = 0 exactly on the short
  # prompts, and the sign that `cort/frac_delta_pos` counts is float noise (it flipped a token
  # between packed and padded on one CPU model)
  minus[:, -1] = (minus[:, -1] + 1) % v
  out = {"tokens_BxL": np.concatenate([plus, resp], 1),
         "attn_mask_BxL": np.concatenate([pmask, rmask], 1),
         "minus_tokens_BxM": np.concatenate([minus, resp], 1),
         "minus_attn_mask_BxM": np.concatenate([mmask, rmask], 1),
         "mask_BxN": rmask.astype(np.float32),
         "adv_B": rng.randn(b).astype(np.float32),
         "sampler_logp_BxN": (-rng.rand(b, N) * 3).astype(np.float32),
         "rewards_B": rng.rand(b).astype(np.float32)}
  if crit:
    cmask = np.repeat(out["attn_mask_BxL"][:, None], crit, 1).copy()
    cmask[:, 1:, P - 2] = 0  # criterion j > 0 removes a prompt token... kept contiguous:
    cmask[:, 1:, :P - 1] = 0  # ...its rows keep only the last prompt token
    out.update(crit_tokens_BxCxL=np.repeat(out["tokens_BxL"][:, None], crit, 1),
               crit_attn_mask_BxCxL=cmask,
               crit_id_BxC=np.tile(np.arange(crit, dtype=np.int32), (b, 1)))
  return out


@pytest.mark.parametrize("t", [P + N, 2 * (P + N), 40])
def test_plan_rebuilds_every_sequence(t):
  batch = ragged_batch(seed=1)
  tokens, mask = batch["tokens_BxL"], batch["attn_mask_BxL"]
  p = packing.plan(mask, G, t, N)
  b, l = tokens.shape
  w = p["src"].shape[1]
  assert (w * G) % t == 0
  packed = np.asarray(packing.gather_tokens(jnp.asarray(tokens), jnp.asarray(p["src"]), G, t))
  seg, pos = p["seg"].reshape(-1, t), p["pos"].reshape(-1, t)
  start, length = packing.runs(mask)
  for row in range(b):
    g, j = divmod(row, G)
    rows_g = slice(g * (w * G // t), (g + 1) * (w * G // t))
    where = seg[rows_g] == j + 1
    assert where.sum() == length[row]  # every real token once, in one packed row
    r = np.flatnonzero(where.any(1))
    assert len(r) == 1
    got = packed[rows_g][r[0]][where[r[0]]]
    np.testing.assert_array_equal(got, tokens[row, start[row]:start[row] + length[row]])
    np.testing.assert_array_equal(pos[rows_g][r[0]][where[r[0]]], np.arange(length[row]))
    # out: the packed slot before each real response token holds the padded predecessor
    flat = packed[rows_g].reshape(-1)
    for k in range(N):
      if mask[row, P + k] and mask[row, P + k - 1]:
        assert flat[p["out"][row, k]] == tokens[row, P + k - 1]
  # take / put: each real response token once, at the slot `out` names, nothing else
  take, put = p["take"].reshape(b // G, -1), p["put"].reshape(b // G, -1)
  for g in range(b // G):
    real = put[g] < G * N
    assert sorted(put[g][real]) == [j * N + k for j in range(G) for k in range(N)
                                    if mask[g * G + j, P + k]]
    out_g = p["out"][g * G:(g + 1) * G].reshape(-1)
    np.testing.assert_array_equal(take[g][real], out_g[put[g][real]])
    assert (take[g][~real] == 0).all()
  assert packing.utilization(p["seg"]) > 0


def test_plan_refuses_what_it_cannot_pack():
  mask = np.ones((4, 8), np.int32)
  with pytest.raises(packing.PackingError, match="tokens_per_row"):
    packing.plan(mask, 4, 6, 2)
  mask[1, 3] = 0
  with pytest.raises(packing.PackingError, match="row 1"):
    packing.plan(mask, 4, 8, 2)
  with pytest.raises(packing.PackingError, match="groups of 3"):
    packing.plan(np.ones((4, 8), np.int32), 3, 8, 2)


@pytest.mark.numerics  # golden / equivalence: also under another ISA
@pytest.mark.parametrize("attention,compact", [("dense", True), ("cudnn", True),
                                               ("dense", False)])
def test_packed_forward_equals_padded(attention, compact):
  """The packed forward's log-probs and entropies are the padded forward's at every real
  response token; `compact` (the plan's take / put) computes them only there (0 at the
  response's padding), else at all B × N positions."""
  batch = ragged_batch(seed=2)
  cfg = CFG.replace(attention=attention)
  graphdef, state = nnx.split(create_model(cfg, seed=0))
  t = 2 * (P + N)
  p = packing.plan(batch["attn_mask_BxL"], G, t, N)
  sc = setup(())[3]

  @jax.jit
  def both(state, tokens, mask, arrays):
    f = lambda pk: response_outputs(graphdef, state, tokens, mask, N, sc, pack=pk)
    return f(None), f(Pack(**arrays, group=G, tokens_per_row=t))

  keys = packing.PLAN_KEYS if compact else ("src", "seg", "pos", "out")
  ref, out = both(state, batch["tokens_BxL"], batch["attn_mask_BxL"], {k: p[k] for k in keys})
  m = batch["mask_BxN"] > 0
  for k in ("logp_BxT", "entropy_BxT"):
    np.testing.assert_allclose(np.where(m, out[k], 0), np.where(m, ref[k], 0), atol=1e-5)
    if compact:
      assert (np.asarray(out[k])[~m] == 0).all()
  assert p["take"].shape[1] < N  # fewer log-prob positions than B × N


def _compare(ref, out, atol=1e-5):
  (s_ref, m_ref), (s_out, m_out) = ref, out
  for a, b in zip(jax.tree.leaves(s_ref.params), jax.tree.leaves(s_out.params)):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=atol, rtol=1e-5)
  assert set(m_ref) == set(m_out)
  for k in m_ref:
    np.testing.assert_allclose(np.asarray(m_out[k]), np.asarray(m_ref[k]), atol=atol,
                               rtol=1e-5, err_msg=k)


def _packed(batch, sc, t, unit=G):
  return (packing.add_plans(batch, unit, t),
          dataclasses.replace(sc, tokens_per_row=t, pack_group=unit))


@pytest.mark.parametrize("grad_accum,whole", [(1, True), (2, True), (2, False)])
def test_fused_cort_step_packed_equals_padded(grad_accum, whole):
  """μ = 1 (π_old = sg(π_θ), the replay inside) with the CoRT replay, each micro-batch packed
  as one unit (what the trainer does) or group by group: the parameters after one SGD step
  (the gradient itself) and every metric."""
  graphdef, params, opt, sc, obj = setup(opt=optax.sgd(1.0))
  batch = ragged_batch(seed=3)
  unit = packing.unit_rows(16, G, fused=True, grad_accum=grad_accum) if whole else G
  pbatch, psc = _packed(batch, sc, 2 * (P + N), unit)
  assert "pack_minus_src" in pbatch
  run = lambda sc, b: jit_train_step(graphdef, opt, sc, grad_accum)(
      init_state(jax.tree.map(jnp.copy, params), opt, obj), b, None)
  _compare(run(sc, batch), run(psc, pbatch))


def test_minibatch_updates_packed_equal_padded():
  """μ = 2 epochs × 2 mini-batches with the CoRT replay and a reference KL term: score once,
  then a device-side permutation of whole groups carries the plans with the rows."""
  graphdef, params, opt, sc, obj = setup(opt=optax.sgd(0.5), use_ref=True)
  batch = ragged_batch(seed=4)
  pbatch, psc = _packed(batch, sc, P + N + 6)
  run = lambda sc, b: jit_update_batch(graphdef, opt, dataclasses.replace(
      sc, fused_scoring=False), epochs=2, num_minibatches=2)(
      init_state(jax.tree.map(jnp.copy, params), opt, obj), b, params, jax.random.key(5))
  _compare(run(sc, batch), run(psc, pbatch))


@pytest.mark.parametrize("num_minibatches,grad_accum", [(2, 1), (4, 1), (2, 2)])
def test_whole_minibatch_plans_equal_padded(num_minibatches, grad_accum):
  """μ = 1 epoch × M mini-batches with the CoRT replay and a reference KL term: the batch put
  in its mini-batch order on the host (`minibatch_order`) and each mini-batch (or its
  gradient-accumulation micro-batches) packed as one unit makes the updates of the padded
  batch permuted on device with the same key; and it packs into fewer slots than the plans of
  one group each."""
  from rljax.update import minibatch_order
  graphdef, params, opt, sc, obj = setup(opt=optax.sgd(0.5), use_ref=True)
  batch = ragged_batch(seed=8)
  key = jax.random.key(11)
  order = minibatch_order(key, 16, G, num_minibatches)
  assert sorted(order.tolist()) == list(range(16))
  unit = packing.unit_rows(16, G, fused=False, grad_accum=grad_accum,
                           num_minibatches=num_minibatches, presorted=True)
  assert unit == 16 // num_minibatches // grad_accum
  t = P + N + 6
  sorted_batch = {k: v[order] for k, v in batch.items()}
  pbatch, psc = _packed(sorted_batch, sc, t, unit)
  run = lambda sc, b, presorted: jit_update_batch(graphdef, opt, dataclasses.replace(
      sc, fused_scoring=False), epochs=1, num_minibatches=num_minibatches,
      grad_accum=grad_accum, presorted=presorted)(
      init_state(jax.tree.map(jnp.copy, params), opt, obj), b, params, key)
  _compare(run(sc, batch, False), run(psc, pbatch, True))
  # one group of long answers: group plans give every group its rows, mini-batch plans
  # share them with the short groups of its mini-batch
  long = ragged_batch(seed=8)
  long["attn_mask_BxL"][:G, P:] = long["minus_attn_mask_BxM"][:G, PM:] = 1
  long["attn_mask_BxL"][G:, P + 2:] = long["minus_attn_mask_BxM"][G:, PM + 2:] = 0
  size = lambda u: packing.plans(long, u, t)["pack_plus_seg"].size
  assert size(unit) < size(G) if unit > G else size(unit) == size(G), (size(unit), size(G))


def test_presorted_batch_needs_one_epoch():
  graphdef, params, opt, sc, obj = setup(opt=optax.sgd(0.5))
  with pytest.raises(ValueError, match="one epoch"):
    jit_update_batch(graphdef, opt, dataclasses.replace(sc, fused_scoring=False), epochs=2,
                     num_minibatches=2, presorted=True)(
        init_state(params, opt, obj), ragged_batch(seed=9), None, jax.random.key(0))


def test_per_criterion_replay_packed_equals_padded():
  graphdef, params, opt, sc, obj = setup(opt=optax.sgd(1.0), replay_mode="per_criterion",
                                         num_criteria_ids=3)
  batch = ragged_batch(seed=6, crit=3)
  pbatch, psc = _packed(batch, sc, 2 * (P + N))
  assert pbatch["pack_crit_src"].shape[:2] == (16, 3)
  run = lambda sc, b: jit_train_step(graphdef, opt, sc)(
      init_state(jax.tree.map(jnp.copy, params), opt, obj), b, None)
  _compare(run(sc, batch), run(psc, pbatch))


def test_grad_accum_that_splits_a_group_is_refused():
  graphdef, params, opt, sc, obj = setup(opt=optax.sgd(1.0))
  pbatch, psc = _packed(ragged_batch(b=8, seed=7), sc, 2 * (P + N))
  with pytest.raises(ValueError, match="split a unit"):
    jit_train_step(graphdef, opt, psc, 4)(init_state(params, opt, obj), pbatch, None)


def test_balanced_groups_deal_tokens_evenly():
  """`train.balance_tokens`: whole groups dealt into equal-count blocks of about the same
  tokens. A worked case by hand, the key's permutation as the tie order, and on heavy-tailed
  lengths (a quarter of the answers at the cap) the fullest block within 5 % of the best
  partition (brute force) and below the random draw's in the mean."""
  import itertools
  from rljax.update import balanced_groups, minibatch_order
  # largest first: 100 -> A, 90 -> B, the 2s -> B (92, 94, 96; B is then full), the 1s -> A
  tokens = np.array([100, 1, 1, 1, 90, 2, 2, 2])
  perm = np.array([5, 0, 1, 2, 3, 4, 6, 7])
  got = balanced_groups(perm, tokens, 2)
  assert got.tolist() == [5, 4, 6, 7, 0, 1, 2, 3]  # B first: group 5 leads the permutation
  assert sorted(got.tolist()) == list(range(8))
  assert [tokens[got[:4]].sum(), tokens[got[4:]].sum()] == [96, 103]
  with pytest.raises(ValueError, match="equal blocks"):
    balanced_groups(np.arange(6), np.ones(6), 4)
  rng = np.random.RandomState(0)
  worst = []
  for _ in range(40):
    t = np.where(rng.rand(8) < 0.25, 512, rng.randint(20, 400, 8)) + 64
    best = min(max(t[list(c)].sum(), t.sum() - t[list(c)].sum())
               for c in itertools.combinations(range(8), 4))
    b = balanced_groups(rng.permutation(8), t, 2)
    worst.append(max(t[b[:4]].sum(), t[b[4:]].sum()) / best)
  assert max(worst) <= 1.05, max(worst)
  # rows: groups of G; the balanced order is the key's draw re-dealt, rows of a group together
  g, rows = 4, 32
  rt = np.repeat(np.where(rng.rand(rows // g) < 0.3, 600, 80), g)
  key = jax.random.key(3)
  plain = minibatch_order(key, rows, g, 4)
  bal = minibatch_order(key, rows, g, 4, row_tokens=rt)
  assert sorted(bal.tolist()) == list(range(rows))
  assert (bal.reshape(-1, g) // g == (bal.reshape(-1, g) // g)[:, :1]).all()
  spread = lambda o: rt[o].reshape(4, -1).sum(1)
  assert spread(bal).max() - spread(bal).min() <= spread(plain).max() - spread(plain).min()
  fullest = lambda o, t, m: t[o].reshape(m, -1).sum(1).max()
  pairs = []
  for s in range(30):
    t = np.repeat(np.where(rng.rand(8) < 0.25, 576, rng.randint(84, 464, 8)), g)
    k = jax.random.key(s)
    pairs.append([fullest(minibatch_order(k, rows, g, 2, row_tokens=t), t, 2),
                  fullest(minibatch_order(k, rows, g, 2), t, 2)])
  pairs = np.asarray(pairs)
  assert (pairs[:, 0] <= pairs[:, 1]).mean() > 0.9 and pairs[:, 0].mean() < pairs[:, 1].mean()


def _rows_of(lengths, p=64, n=384):
  """A left-padded prompt of 48 tokens and a response of each length, in rows of p + n."""
  b = len(lengths)
  pmask = np.zeros((b, p), np.int32)
  pmask[:, p - 48:] = 1
  rmask = (np.arange(n)[None] < np.asarray(lengths)[:, None]).astype(np.int32)
  mask = np.concatenate([pmask, rmask], 1)
  return {"tokens_BxL": np.ones_like(mask), "attn_mask_BxL": mask,
          "mask_BxN": rmask.astype(np.float32)}


def test_default_row_length_never_packs_into_more_slots_than_padding():
  # rows of 448 = 64 + 384: sequences of 48 + 380 fit 512 no better than 448 (one per row),
  # so rounding up to 512 would cost 512 / 448 = 1.14x the padded positions
  full = _rows_of([380] * 8)
  assert packing.row_length(full, 8) == 448
  slots = sum(packing.packed_tokens(packing.add_plans(full, 8, 448, bucket=True)).values())
  assert slots <= sum(packing.padded_tokens(full).values())
  # sequences of 48 + 200 pair in a row of 512 but not of 448: the rounded row wins
  pairs = _rows_of([200] * 8)
  assert packing.row_length(pairs, 8) == 512
  got = {t: sum(packing.packed_tokens(packing.add_plans(pairs, 8, t, bucket=True)).values())
         for t in (448, 512)}
  assert got[512] < got[448], got
  assert packing.row_length(_rows_of([10] * 8, n=64), 8) == 128  # 128 already a multiple
