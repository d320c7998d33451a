"""The CPU decode-attention kernel (rljax/models/cpu_attention.py) against XLA's attention,
its row independence (what keeps a compacting sampler's samples), and the sampler with it."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.models import cpu_attention
from rljax.models.attention import cache_attention, prefix_attention
from rljax.models.config import ModelConfig
from rljax.models.decoder import Decoder
from rljax.rollout import SamplerConfig, generate
from rljax.rollout.sampler import uses_decode_kernel

pytestmark = pytest.mark.skipif(not cpu_attention.available(),
                                reason=f"kernel not built: {cpu_attention.why_unavailable()}")


def _case(seed, L=3, B=6, K=2, G=3, S=20, E=12, P=2, Sp=7):
  r = np.random.RandomState(seed)
  f = lambda *s: jnp.asarray(r.randn(*s), jnp.float32)
  valid = jnp.asarray(r.rand(B, S) > 0.3)
  pvalid = jnp.asarray(r.rand(P, Sp) > 0.3)
  return (f(B, K * G, E), f(L, B, K, S, E), f(L, B, K, S, E), valid, f(L, P, K, Sp, E),
          f(L, P, K, Sp, E), pvalid)


@pytest.mark.parametrize("shape", [dict(), dict(E=8, G=1, K=3), dict(E=64, S=40, B=4, P=4),
                                   dict(E=5, G=2, B=8, P=1)])
@pytest.mark.parametrize("with_prefix", [False, True])
def test_kernel_equals_xla_attention(shape, with_prefix):
  q, k, v, valid, pk, pv, pvalid = _case(0, **shape)
  s = k.shape[3]
  for layer, n in [(0, 1), (1, s // 2), (k.shape[0] - 1, s)]:
    valid_n = valid.at[:, n - 1].set(True)  # the step's own slot is always real
    allowed = valid_n[:, None, :n]
    args = (q[:, None], k[layer][:, :, :n], v[layer][:, :, :n], allowed)
    if with_prefix:
      ref = prefix_attention(*args, pk[layer], pv[layer], pvalid)[:, 0]
      out = cpu_attention.decode_attention(q, k, v, valid_n, layer, n, (pk, pv, pvalid))
    else:
      ref = cache_attention(*args)[:, 0]
      out = cpu_attention.decode_attention(q, k, v, valid_n, layer, n)
    # float32: another summation order and libm's exp; values are O(1)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), rtol=1e-5, atol=2e-6)


def test_rows_are_independent_of_the_batch():
  """A row's output is bitwise the same alone, in another batch, and with its prefix shared
  by its prompt's rows or copied to it (how compaction regroups rows)."""
  q, k, v, valid, pk, pv, pvalid = _case(1, B=8, P=2)
  valid = valid.at[:, 9].set(True)
  full = cpu_attention.decode_attention(q, k, v, valid, 1, 10, (pk, pv, pvalid))
  rows = jnp.asarray([6, 1, 3])  # rows of both prompts, reordered, as after a compaction
  src = rows // 4
  part = cpu_attention.decode_attention(
      q[rows], k[:, rows], v[:, rows], valid[rows], 1, 10,
      (pk[:, src], pv[:, src], pvalid[src]))
  np.testing.assert_array_equal(np.asarray(part), np.asarray(full)[np.asarray(rows)])


def test_empty_prefix_slots_change_no_bit():
  """Invalid slots appended to the shared prefix (how the sampler pads prompt caches to
  `_PREFIX_BUCKET`) are skipped: the output is bitwise the unpadded prefix's, whatever
  the padded slots hold."""
  q, k, v, valid, pk, pv, pvalid = _case(4, B=6, P=3, Sp=7)
  valid = valid.at[:, 11].set(True)
  ref = cpu_attention.decode_attention(q, k, v, valid, 2, 12, (pk, pv, pvalid))
  r = np.random.RandomState(5)
  junk = lambda: jnp.asarray(1e3 * r.randn(*pk.shape[:3], 9, pk.shape[4]), jnp.float32)
  padded = (jnp.concatenate([pk, junk()], 3), jnp.concatenate([pv, junk()], 3),
            jnp.concatenate([pvalid, jnp.zeros((3, 9), bool)], 1))
  out = cpu_attention.decode_attention(q, k, v, valid, 2, 12, padded)
  np.testing.assert_array_equal(np.asarray(out), np.asarray(ref))


def test_traced_layer_and_length():
  q, k, v, valid, pk, pv, pvalid = _case(2)
  valid = valid.at[:, :12].set(True)

  @jax.jit
  def loop(q):
    def body(i, acc):
      return acc + cpu_attention.decode_attention(q, k, v, valid, i, 12 - i, (pk, pv, pvalid))
    return jax.lax.fori_loop(0, k.shape[0], body, jnp.zeros_like(q))

  eager = sum(cpu_attention.decode_attention(q, k, v, valid, i, 12 - i, (pk, pv, pvalid))
              for i in range(k.shape[0]))
  np.testing.assert_allclose(np.asarray(loop(q)), np.asarray(eager), rtol=1e-6, atol=1e-6)


def test_bad_operands_name_the_problem():
  q, k, v, valid, *_ = _case(3)
  with pytest.raises(Exception, match="length exceeds"):
    jax.block_until_ready(cpu_attention.decode_attention(q, k, v, valid, 0, k.shape[3] + 1))
  with pytest.raises(TypeError, match="float32"):
    cpu_attention.decode_attention(q.astype(jnp.bfloat16), k, v, valid, 0, 1)


def test_no_compiler_leaves_xla_attention(monkeypatch, tmp_path):
  saved = dict(cpu_attention._state)
  monkeypatch.setenv("RLJAX_CACHE_DIR", str(tmp_path))
  monkeypatch.setenv("CXX", "no-such-compiler-rljax")
  cpu_attention._state.clear()
  try:
    assert not cpu_attention.available()
    assert "no-such-compiler-rljax" in cpu_attention.why_unavailable()
  finally:
    cpu_attention._state.clear()
    cpu_attention._state.update(saved)
  monkeypatch.setenv("RLJAX_CPU_KERNELS", "0")
  assert not cpu_attention.available()


def _tiny(hidden=48, heads=6, kv_heads=2, head_dim=8, layers=3):
  cfg = ModelConfig(model_type="llama", vocab_size=97, hidden_size=hidden, intermediate_size=64,
                    num_layers=layers, num_heads=heads, num_kv_heads=kv_heads,
                    head_dim=head_dim)
  from flax import nnx
  return Decoder(cfg, nnx.Rngs(0))


def test_sampler_with_the_kernel_matches_xla_attention():
  """Greedy tokens equal; sampled log q within float32 rounding of XLA's attention path."""
  model = _tiny()
  rng = np.random.RandomState(0)
  ids = jnp.asarray(rng.randint(3, 97, (3, 9)), jnp.int32)
  mask = jnp.ones_like(ids).at[0, :4].set(0)  # a left-padded prompt
  for cfg in (SamplerConfig(max_new_tokens=20, temperature=0.0, num_generations=2,
                            stop_token_ids=()),
              SamplerConfig(max_new_tokens=20, temperature=1.0, num_generations=2,
                            stop_token_ids=())):
    assert uses_decode_kernel(model, cfg, None)
    assert not uses_decode_kernel(model, cfg.replace(decode_kernel="xla"), None)
    a = generate(model, ids, mask, jax.random.key(5), cfg)
    b = generate(model, ids, mask, jax.random.key(5), cfg.replace(decode_kernel="xla"))
    np.testing.assert_array_equal(np.asarray(a.tokens_BxN), np.asarray(b.tokens_BxN))
    np.testing.assert_allclose(np.asarray(a.logq_BxN), np.asarray(b.logq_BxN), atol=2e-5)


def test_decode_kernel_is_checked():
  with pytest.raises(ValueError, match="decode_kernel"):
    SamplerConfig(decode_kernel="pallas")


@pytest.mark.parametrize("top_p", [1.0, 0.9])
def test_compacting_sampler_with_the_kernel_is_bitwise_the_plain_one(top_p):
  """With the kernel (each row's attention alone) and the norms' fixed-order sums, every
  recorded quantity is bitwise the plain sampler's, down to decode batches of 2 to 6 rows
  (where XLA:CPU's row reductions over SmolLM2's 576 features changed their bits)."""
  from tests.rollout.helpers import ragged_prompts  # noqa: PLC0415
  model = _tiny(hidden=576, heads=9, kv_heads=3, head_dim=64, layers=2)
  ids, mask = ragged_prompts([5, 9, 3, 7])
  cfg = SamplerConfig(max_new_tokens=60, temperature=1.0, top_p=top_p, num_generations=8,
                      stop_token_ids=(1, 2, 3, 4, 5), record_topk=4)
  stats = {}
  ref = generate(model, ids, mask, jax.random.key(3), cfg)
  r = generate(model, ids, mask, jax.random.key(3), cfg.replace(compact_every=3), stats=stats)
  sizes = [s for _, s in stats["batch_sizes"]]
  assert any(s < 8 for s in sizes), sizes
  for a, b in zip(ref, r):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_prompt_lengths_of_a_bucket_share_the_decode_programs():
  """With the kernel the prompt cache is padded to `_PREFIX_BUCKET` slots: a batch of another
  prompt length (in the same bucket) compiles its prefill only, not the decode program of
  the full batch nor those of the compacted sizes."""
  from rljax.rollout import sampler as smp  # noqa: PLC0415
  from tests.rollout.helpers import ragged_prompts  # noqa: PLC0415
  from flax import nnx  # noqa: PLC0415
  model = _tiny()
  cfg = SamplerConfig(max_new_tokens=24, temperature=1.0, num_generations=4,
                      stop_token_ids=(1, 2, 3, 4, 5, 6, 7, 8), compact_every=4)
  graphdef, _ = nnx.split(model)
  builds, sizes = [], []
  for lengths in ([5, 9, 3], [17, 4, 11]):
    ids, mask = ragged_prompts(lengths, vocab=97)
    stats = {}
    generate(model, ids, mask, jax.random.key(1), cfg, stats=stats)
    sizes.append([s for _, s in stats["batch_sizes"]])
    p = ids.shape[1]
    builds.append(smp._build(graphdef, cfg, smp.cache_slots(cfg, p), p,
                             smp.resolve_stop_ids(cfg, model.cfg.eos_token_id), None, True,
                             True))
    if len(builds) == 1:
      programs = builds[0][1]._cache_size()
  assert sizes[0] and set(sizes[1]) <= set(sizes[0]), sizes  # no batch size new to the 2nd
  assert builds[0][0] is not builds[1][0]  # a prefill per prompt length
  assert builds[0][1] is builds[1][1] and programs > 0  # the jit `generate` ran
  assert builds[1][1]._cache_size() == programs  # no decode program compiled for the 2nd
