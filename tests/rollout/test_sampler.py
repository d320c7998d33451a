"""The sampler records the distribution it really draws from; batching, padding and keys
do not change a row's output; greedy is the argmax chain; sharded equals unsharded."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from scipy import stats

from rljax.logprobs import sampling_logits
from rljax.models import create_model
from rljax.rollout import (SamplerConfig, generate, make_sampler_params, prompt_keys,
                           score_rollout, sequences)
from rljax.sharding import make_mesh
from tests.rollout.helpers import TINY, full_logits, ragged_prompts, tiny_model

V = TINY.vocab_size


@pytest.fixture(scope="module")
def model():
  return tiny_model(seed=0)


@pytest.fixture(scope="module")
def prompts():
  return ragged_prompts([6, 3, 5])


def _response_dist(model, r, cfg):
  """[B, N, V] log of the sampling distribution at each response position (full forward)."""
  ids, mask = sequences(r)
  n = r.tokens_BxN.shape[1]
  logits = full_logits(model, ids, mask)[:, -n - 1:-1]
  x = sampling_logits(logits, cfg.temperature, cfg.top_k, cfg.top_p)
  return np.asarray(jax.nn.log_softmax(x, axis=-1))


@pytest.mark.numerics  # golden / equivalence: also under another ISA
def test_logq_equals_trainer_logprobs_under_truncation_and_head_is_true_topk(model, prompts):
  stop = (TINY.eos_token_id,)  # stop_token_ids=None: the model's eos
  cfg = SamplerConfig(max_new_tokens=8, temperature=0.7, top_k=12, top_p=0.9,
                      num_generations=2, record_topk=5)
  r = generate(model, *prompts, jax.random.key(0), cfg)
  m = np.asarray(r.mask_BxN).astype(bool)
  assert r.tokens_BxN.shape == (6, 8) and m[:, 0].all()
  got = score_rollout(model, r, cfg, with_head=True)
  logq, logp = np.asarray(r.logq_BxN), np.asarray(got["logp_BxN"])
  assert r.logq_BxN.dtype == jnp.float32 and np.isfinite(logq).all()
  assert np.abs(logq - logp)[m].max() <= 1e-4
  assert (logq[~m] == 0).all() and (logq[m] <= 0).all()
  # Head: the recorded top-5 of the truncated distribution is the true one.
  dist = _response_dist(model, r, cfg)
  true_vals = -np.sort(-dist, axis=-1)[..., :5]
  head_ids, head_logq = np.asarray(r.topk_ids_BxNxK), np.asarray(r.topk_logq_BxNxK)
  fin = np.isfinite(true_vals)
  assert (np.isfinite(head_logq) == fin)[m].all()
  np.testing.assert_allclose(head_logq[m][fin[m]], true_vals[m][fin[m]], atol=1e-4)
  gathered = np.take_along_axis(dist, head_ids, axis=-1)
  np.testing.assert_allclose(gathered[m][fin[m]], head_logq[m][fin[m]], atol=1e-4)
  head_logp = np.asarray(got["head_logp_BxNxK"])
  np.testing.assert_allclose(head_logp[m][fin[m]], head_logq[m][fin[m]], atol=1e-4)
  # Truncation is real: some positions have fewer than 5 tokens in their support;
  # some rows stop early, some run to max_new_tokens.
  assert (~fin[m]).any() and r.truncated_B.any() and not r.truncated_B.all()
  # Rows stop after the stop token; the stop token itself is in the mask.
  tokens = np.asarray(r.tokens_BxN)
  for b in range(tokens.shape[0]):
    n = m[b].sum()
    assert m[b, :n].all() and not m[b, n:].any()
    assert bool(r.truncated_B[b]) == (not np.isin(tokens[b, :n], stop).any())
    assert (tokens[b, n:] == cfg.pad_token_id).all()


def test_temperature_one_records_plain_logprobs_and_full_head(model, prompts):
  cfg = SamplerConfig(max_new_tokens=6, temperature=1.0, num_generations=2,
                      stop_token_ids=(), record_topk="full")
  r = generate(model, *prompts, jax.random.key(1), cfg)
  ids, mask = sequences(r)
  plain = jax.nn.log_softmax(full_logits(model, ids, mask)[:, -7:-1], axis=-1)
  want = np.take_along_axis(np.asarray(plain), np.asarray(r.tokens_BxN)[..., None], -1)[..., 0]
  assert np.abs(np.asarray(r.logq_BxN) - want).max() <= 1e-4
  assert r.mask_BxN.all() and r.truncated_B.all()
  assert r.topk_ids_BxNxK.shape == (6, 6, V)
  assert (np.asarray(r.topk_ids_BxNxK) == np.arange(V)).all()
  np.testing.assert_allclose(np.asarray(r.topk_logq_BxNxK), np.asarray(plain), atol=1e-4)


def test_empirical_frequencies_match_recorded_q_chi_square(model):
  """4000 samples of one prompt: prefill samples position 0, the decode loop position 1."""
  cfg = SamplerConfig(max_new_tokens=2, temperature=0.9, top_k=24, top_p=0.95,
                      num_generations=4000, stop_token_ids=(), record_topk="full")
  ids, mask = ragged_prompts([5], seed=3)
  r = generate(model, ids, mask, jax.random.key(7), cfg)
  tokens = np.asarray(r.tokens_BxN)
  q = np.exp(np.asarray(r.topk_logq_BxNxK, np.float64))  # [rows, 2, V]
  np.testing.assert_allclose(q.sum(-1), 1.0, atol=1e-5)
  head = np.asarray(r.topk_logq_BxNxK)
  np.testing.assert_allclose(np.take_along_axis(head, tokens[..., None], -1)[..., 0],
                             np.asarray(r.logq_BxN), atol=1e-5)
  for t in range(2):
    observed = np.bincount(tokens[:, t], minlength=V)
    expected = q[:, t].sum(0)  # Σ over rows of each row's own q
    assert observed[expected == 0].sum() == 0  # never outside the truncated support
    big = expected >= 5
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    keep = exp > 0
    assert big.sum() >= 5
    p_value = stats.chisquare(obs[keep], exp[keep] * obs.sum() / exp[keep].sum()).pvalue
    assert p_value > 1e-3, (t, p_value)


def test_ragged_batch_equals_each_prompt_alone_and_seed_reproducible(model):
  cfg = SamplerConfig(max_new_tokens=6, temperature=1.0, top_p=0.95, num_generations=2,
                      stop_token_ids=(1,), record_topk=3)
  ids, mask = ragged_prompts([7, 4], seed=5)
  keys = prompt_keys(jax.random.key(11), 2)
  r = generate(model, ids, mask, keys, cfg)
  for i, n in enumerate([7, 4]):
    alone = generate(model, ids[i:i + 1, -n:], mask[i:i + 1, -n:], keys[i:i + 1], cfg)
    rows = slice(2 * i, 2 * i + 2)
    np.testing.assert_array_equal(np.asarray(alone.tokens_BxN), np.asarray(r.tokens_BxN[rows]))
    np.testing.assert_array_equal(np.asarray(alone.mask_BxN), np.asarray(r.mask_BxN[rows]))
    np.testing.assert_array_equal(np.asarray(alone.topk_ids_BxNxK),
                                  np.asarray(r.topk_ids_BxNxK[rows]))
    np.testing.assert_allclose(np.asarray(alone.logq_BxN), np.asarray(r.logq_BxN[rows]),
                               atol=1e-5)
  again = generate(model, ids, mask, keys, cfg)
  np.testing.assert_array_equal(np.asarray(again.tokens_BxN), np.asarray(r.tokens_BxN))
  other = generate(model, ids, mask, jax.random.key(12), cfg)
  assert (np.asarray(other.tokens_BxN) != np.asarray(r.tokens_BxN)).any()
  # The G samples of one prompt differ from each other.
  assert (np.asarray(r.tokens_BxN[0]) != np.asarray(r.tokens_BxN[1])).any()


def test_greedy_equals_argmax_chain_of_full_forwards_and_stops(model, prompts):
  ids, mask = prompts
  n = 6
  cfg = SamplerConfig(max_new_tokens=n, temperature=0.0, stop_token_ids=(), record_topk=3)
  r = generate(model, ids, mask, jax.random.key(0), cfg)
  seq = np.concatenate([ids, np.zeros((3, n), np.int32)], 1)
  seq_mask = np.concatenate([mask, np.ones((3, n), np.int32)], 1)
  fwd = jax.jit(lambda s: full_logits(model, s, seq_mask))
  p = ids.shape[1]
  for t in range(n):  # future slots hold placeholders; causal attention never sees them
    seq[:, p + t] = np.asarray(jnp.argmax(fwd(seq)[:, p + t - 1], -1))
  np.testing.assert_array_equal(np.asarray(r.tokens_BxN), seq[:, p:])
  assert (np.asarray(r.logq_BxN) == 0).all() and r.mask_BxN.all() and r.truncated_B.all()
  np.testing.assert_array_equal(np.asarray(r.topk_ids_BxNxK[..., 0]), seq[:, p:])
  assert (np.asarray(r.topk_logq_BxNxK[..., 1:]) == -np.inf).all()
  # Stopping: make row 0's third greedy token a stop token.
  stop = int(seq[0, p + 2])
  s = generate(model, ids, mask, jax.random.key(0), cfg.replace(stop_token_ids=(stop,)))
  first = np.argmax(seq[:, p:] == stop, axis=1)
  hit = (seq[:, p:] == stop).any(1)
  for b in range(3):
    k = first[b] + 1 if hit[b] else n
    assert int(s.mask_BxN[b].sum()) == k and bool(s.truncated_B[b]) == (not hit[b])
    np.testing.assert_array_equal(np.asarray(s.tokens_BxN[b, :k]), seq[b, p:p + k])
    assert (np.asarray(s.tokens_BxN[b, k:]) == 0).all()


@pytest.mark.numerics  # golden / equivalence: also under another ISA
def test_sharded_generation_equals_unsharded(model, prompts):
  mesh = make_mesh((2, 2, 2))
  cfg = SamplerConfig(max_new_tokens=5, temperature=0.8, top_k=20, num_generations=4,
                      stop_token_ids=(1,), record_topk=2)
  ids, mask = prompts[0][:2], prompts[1][:2]
  ref = generate(model, ids, mask, jax.random.key(3), cfg)
  r = generate(model, ids, mask, jax.random.key(3), cfg, mesh=mesh)
  assert r.tokens_BxN.sharding.spec[0] == ("data", "fsdp")
  np.testing.assert_array_equal(np.asarray(r.tokens_BxN), np.asarray(ref.tokens_BxN))
  np.testing.assert_array_equal(np.asarray(r.mask_BxN), np.asarray(ref.mask_BxN))
  np.testing.assert_allclose(np.asarray(r.logq_BxN), np.asarray(ref.logq_BxN), atol=1e-5)
  # A quantized copy of a sharded trainer keeps every parameter's sharding.
  trainer = create_model(TINY, mesh=mesh)
  _, copy = make_sampler_params(trainer, "w8a8+kv4")
  for a, b in zip(jax.tree.leaves(nnx.to_pure_dict(nnx.state(trainer))),
                  jax.tree.leaves(nnx.to_pure_dict(copy))):
    assert a.sharding == b.sharding


@pytest.mark.parametrize("spec", ["none", "bf16", "kv4"])
def test_decode_over_the_shared_prompt_cache_equals_the_cache_copied_per_row(model, prompts,
                                                                             spec, monkeypatch):
  """Each prompt's prefill is one SharedPrefix read by its G rows; copying it to every
  row (the sampler before) draws the same tokens with the same recorded q: float32,
  bfloat16 and a packed int4 cache, ragged prompts and stops included. (Not compared token
  by token under W8A8: its activations are rounded to an integer grid, so the ~1e-7
  reordering of the attention sums flips a rounding now and then and the samples part:
  47 of 630 tokens for "w8a8+kv8" here.)"""
  from rljax.rollout import sampler as smp
  cfg = SamplerConfig(max_new_tokens=70, temperature=1.0, top_k=30, num_generations=3,
                      stop_token_ids=(1,), record_topk=3)  # 70 > one 64-slot decode bucket
  copy = make_sampler_params(model, spec)
  ids, mask = prompts
  shared = generate(copy, ids, mask, jax.random.key(5), cfg)
  monkeypatch.setattr(smp, "shares_prefix", lambda *a: False)
  copied = generate(copy, ids, mask, jax.random.key(5), cfg)
  np.testing.assert_array_equal(np.asarray(shared.tokens_BxN), np.asarray(copied.tokens_BxN))
  np.testing.assert_array_equal(np.asarray(shared.mask_BxN), np.asarray(copied.mask_BxN))
  np.testing.assert_allclose(np.asarray(shared.logq_BxN), np.asarray(copied.logq_BxN),
                             atol=1e-5)
  np.testing.assert_array_equal(np.asarray(shared.topk_ids_BxNxK),
                                np.asarray(copied.topk_ids_BxNxK))
  assert np.asarray(shared.mask_BxN).sum(1).max() > 64  # a row decoded past the first bucket


def _assert_same_samples(a, b):
  """Tokens, masks, stops and head ids equal; log q to float32 rounding. A row's products
  have the same shapes in any decode batch (batch dims only; XLA's attention expands the
  shared prompt cache per row inside the step), but XLA:CPU may fuse or tile a program
  differently at another batch size, so the last bits are not promised here for every copy.
  (With the CPU decode kernel they are bitwise: tests/models/test_cpu_attention.py; on
  SmolLM2 bench/rollout.py checks the tokens.)"""
  for f in ("tokens_BxN", "mask_BxN", "truncated_B", "topk_ids_BxNxK"):
    np.testing.assert_array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f)), f)
  for f in ("logq_BxN", "topk_logq_BxNxK"):
    x, y = np.asarray(getattr(a, f)), np.asarray(getattr(b, f))
    np.testing.assert_array_equal(np.isinf(x), np.isinf(y), f)
    np.testing.assert_allclose(x[np.isfinite(x)], y[np.isfinite(y)], atol=1e-5, err_msg=f)


# Several stop ids: rows end at spread-out steps, so the batch shrinks several times.
_STOPS = (1, 2, 3, 4, 5)


@pytest.mark.parametrize("spec,share,top_p", [("none", False, 0.9), ("kv4", True, 1.0),
                                              ("bf16", True, 0.9)])
def test_compacting_sampler_draws_the_same_samples(spec, share, top_p, monkeypatch):
  """compact_every moves the running rows into smaller decode batches (a shared prompt cache
  becomes one prefix per kept row); each row keeps its key and cache, so every recorded
  quantity is today's sampler's, at a fraction of the decode row-steps."""
  from rljax.rollout import sampler as smp
  if not share:
    monkeypatch.setattr(smp, "shares_prefix", lambda *a: False)
  model = tiny_model(seed=0)
  copy = make_sampler_params(model, spec)
  ids, mask = ragged_prompts([5, 9, 3, 7])
  cfg = SamplerConfig(max_new_tokens=80, temperature=1.0, top_p=top_p, num_generations=8,
                      stop_token_ids=_STOPS, record_topk=4)
  plain, compact = {}, {}
  ref = generate(copy, ids, mask, jax.random.key(3), cfg, stats=plain)
  r = generate(copy, ids, mask, jax.random.key(3), cfg.replace(compact_every=4), stats=compact)
  _assert_same_samples(ref, r)
  sizes = [s for _, s in compact["batch_sizes"]]
  assert len(sizes) >= 2 and sizes == sorted(sizes, reverse=True) and sizes[-1] < 16
  assert compact["row_steps"] < 0.5 * plain["row_steps"]
  lengths = np.asarray(ref.mask_BxN).sum(1)
  assert plain["row_steps"] == 32 * (lengths.max() - 1)  # every row, every step


@pytest.mark.numerics  # golden / equivalence: also under another ISA
def test_compacting_sampler_on_a_mesh_keeps_batch_shards_and_samples():
  """On a (2, 2, 2) mesh the decode batch shrinks in multiples of the 4 batch shards (2 rows
  per shard at least), and the samples equal the plain sampler's on that mesh (greedy too)."""
  model = tiny_model(seed=0)
  ids, mask = ragged_prompts([5, 9, 3, 7])
  mesh = make_mesh((2, 2, 2))
  cfg = SamplerConfig(max_new_tokens=40, temperature=1.0, num_generations=8,
                      stop_token_ids=_STOPS, record_topk=2)
  ref = generate(model, ids, mask, jax.random.key(4), cfg, mesh=mesh)
  stats = {}
  r = generate(model, ids, mask, jax.random.key(4), cfg.replace(compact_every=3), mesh=mesh,
               stats=stats)
  assert r.tokens_BxN.sharding.spec[0] == ("data", "fsdp")
  _assert_same_samples(ref, r)
  sizes = [s for _, s in stats["batch_sizes"]]
  assert sizes and all(s % 8 == 0 and s >= 8 for s in sizes)
  greedy = cfg.replace(temperature=0.0, stop_token_ids=(7, 9, 11, 13))
  _assert_same_samples(generate(model, ids, mask, 0, greedy, mesh=mesh),
                       generate(model, ids, mask, 0, greedy.replace(compact_every=2), mesh=mesh))


def test_compact_size_is_the_smallest_ladder_batch_that_holds_the_live_rows():
  from rljax.rollout.sampler import compact_size
  ladder = [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80]
  for floor in (2, 8):
    for rows in (32, 64, 30, 160):
      for live in range(0, rows + 1):
        size = compact_size(live, rows, floor)
        fits = [floor * m for m in ladder if floor * m >= max(live, 1)]
        assert size == min([rows] + fits[:1]), (floor, rows, live)
        assert size >= live and (size == rows or size % floor == 0)
  # the 32-row realistic batch: four sizes per doubling
  assert sorted({compact_size(l, 32, 2) for l in range(33)}) == [
      2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32]


def test_compact_every_is_checked():
  with pytest.raises(ValueError, match="compact_every"):
    SamplerConfig(compact_every=-1)
