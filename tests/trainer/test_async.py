"""The sampler on its own devices, k policy versions behind the learner (rljax.loop.pipeline,
rljax.loop.placement), on :tiny with 8 CPU devices:

- disaggregated with k = 0 equals colocated (the same tokens; params <= 1e-6 after 3 steps);
- disaggregated with k = 1 (the sampler drawing batch t + 1 while batch t trains) equals the
  colocated `rollout.lag = 1` loop run in turn: the same tokens and recorded log q, params
  <= 1e-6 after 4 steps;
- the staleness shows in `mismatch/*` (KL(q || p) > 0 with copy `none`) only when k = 1.

The colocated runs use 4 of the 8 devices, the disaggregated ones 4 + 4 in the same mesh
shape, so both stages run the same programs on the same shapes and the runs are equal bit for
bit (the asserts allow 1e-6, the issue's tolerance). On 8 devices against 4, the trainer's sums
split differently and Adam at this lr turns that into 6e-5 after 3 steps (measured).
"""
import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from rljax.loop import pipeline as pipe  # noqa: E402
from rljax.sweep import load_config_module  # noqa: E402
from rljax.trainer import Trainer  # noqa: E402
from tests.trainer.helpers import compile_cache_env, xla_flags  # noqa: E402


def _run(tmp_path, name, steps, devices=8, config="cort_grpo", arg="tiny", **over):
  cfg = load_config_module(os.path.join(ROOT, "configs", f"{config}.py")).get_config(arg)
  cfg.data.data_dir = str(tmp_path / "tfds")
  cfg.eval.num_prompts, cfg.train.steps, cfg.log.plot = 0, steps, False
  cfg.log.tensorboard, cfg.checkpoint.every = False, 0
  cfg.optim.lr = 1e-3  # moves the params (and with them p) without NaN steps at :tiny
  for k, v in over.items():
    cfg.rollout[k] = v
  tr = Trainer(cfg, str(tmp_path / name), devices=jax.devices()[:devices])
  seen, metrics = [], []
  assemble, write = tr.assemble, tr.log.write
  tr.assemble = lambda roll: (seen.append((np.asarray(roll.r.tokens_BxN),
                                           np.asarray(roll.r.logq_BxN))), assemble(roll))[1]
  tr.log.write = lambda step, m: (metrics.append(dict(m)), write(step, m))[1]
  tr.run()
  return tr, seen, metrics


def _params_diff(a, b):
  return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
             for x, y in zip(jax.tree.leaves(a.state.params), jax.tree.leaves(b.state.params)))


DISAGG = dict(placement="disaggregated", num_devices=4)


def test_disaggregated_k0_equals_colocated(tmp_path):
  co, co_seen, co_m = _run(tmp_path, "co", 3, devices=4)
  dis, dis_seen, dis_m = _run(tmp_path, "dis", 3, **DISAGG)
  t_dev, s_dev = (set(m.devices.flat) for m in (dis.place.trainer_mesh,
                                                  dis.place.sampler_mesh))
  assert len(t_dev) == len(s_dev) == 4 and t_dev.isdisjoint(s_dev)
  assert all(x.sharding.device_set <= t_dev for x in jax.tree.leaves(dis.state.params))
  assert all(x.sharding.device_set <= s_dev for x in jax.tree.leaves(dis.sync.held()[1]))
  for (t0, q0), (t1, q1) in zip(co_seen, dis_seen, strict=True):
    np.testing.assert_array_equal(t0, t1)
    np.testing.assert_allclose(q0, q1, rtol=0, atol=1e-6)
  d = _params_diff(co, dis)
  assert d <= 1e-6, d
  assert [m["rollout/staleness"] for m in dis_m] == [0.0] * 3
  assert max(m["mismatch/kl_q_p"] for m in dis_m) <= 1e-6


def test_lora_disaggregated_k0_equals_colocated(tmp_path):
  """LoRA: the base moves to the sampler's devices once, then only the adapters travel and
  merge there; the same tokens and adapters as colocated."""
  co, co_seen, _ = _run(tmp_path, "co", 2, devices=4, arg="tiny,lora=4")
  dis, dis_seen, _ = _run(tmp_path, "dis", 2, arg="tiny,lora=4", **DISAGG)
  s_dev = set(dis.place.sampler_mesh.devices.flat)
  assert all(x.sharding.device_set <= s_dev for x in jax.tree.leaves(dis.sync.held()[1]))
  assert all(x.sharding.device_set <= s_dev for x in jax.tree.leaves(dis.sampler_base))
  for (t0, q0), (t1, q1) in zip(co_seen, dis_seen, strict=True):
    np.testing.assert_array_equal(t0, t1)
    np.testing.assert_allclose(q0, q1, rtol=0, atol=1e-6)
  assert _params_diff(co, dis) <= 1e-6


def _cli(wd, data, steps):
  return [sys.executable, "-m", "rljax.train", "--config", "configs/cort_grpo.py:tiny",
          f"--config.train.steps={steps}", f"--config.data.data_dir={data}",
          "--config.eval.num_prompts=0", "--config.optim.lr=1e-3", "--config.log.plot=False",
          "--config.log.tensorboard=False", "--config.rollout.placement=disaggregated",
          "--config.rollout.num_devices=4", "--config.rollout.max_staleness=1",
          f"--workdir={wd}"]


def _saved_params(wd, step):
  import orbax.checkpoint as ocp
  tree = ocp.StandardCheckpointer().restore(os.path.join(wd, "checkpoints", "last", str(step),
                                                         "state"))["train"]
  return tree["params"] if isinstance(tree, dict) else tree[0]


def test_disaggregated_k1_equals_colocated_lag1(tmp_path):
  lag, lag_seen, lag_m = _run(tmp_path, "lag", 4, devices=4, lag=1)
  dis, dis_seen, dis_m = _run(tmp_path, "dis", 4, max_staleness=1, **DISAGG)
  for (t0, q0), (t1, q1) in zip(lag_seen, dis_seen, strict=True):
    np.testing.assert_array_equal(t0, t1)
    np.testing.assert_allclose(q0, q1, rtol=0, atol=1e-6)
  d = _params_diff(lag, dis)
  assert d <= 1e-6, d
  # batch 0 and 1 come from version 0, batch t from t - 1 after that
  assert [m["rollout/staleness"] for m in dis_m] == [0.0, 1.0, 1.0, 1.0]
  assert [d.version for d in dis.pipeline.history] == [0, 0, 1, 2]
  # the stale sampler shows as mismatch with copy none: KL(q||p) > 0 from step 2 on
  kl = [m["mismatch/kl_q_p"] for m in dis_m]
  assert kl[0] <= 1e-6 and min(kl[1:]) > 1e-4, kl
  # the collect of batch t + 1 ran during update t
  assert max(m["rollout/overlap"] for m in dis_m[:-1]) > 0, [m["rollout/overlap"] for m in dis_m]

  # SIGKILL after the step-2 checkpoint (batch 2, drawn from version 1, is in flight and
  # saved with it), rerun: the run resumes and ends with the uninterrupted run's params
  wd, data = str(tmp_path / "killed"), str(tmp_path / "tfds")
  env = dict(os.environ, XLA_FLAGS=xla_flags(8),
             **compile_cache_env(tmp_path / "jit_cache"))
  proc = subprocess.Popen(_cli(wd, data, 4), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)
  t0 = time.time()
  while not os.path.exists(os.path.join(wd, "checkpoints", "last", "2")):
    assert proc.poll() is None, proc.communicate()[0][-3000:]
    assert time.time() - t0 < 300
    time.sleep(0.05)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  out = subprocess.run(_cli(wd, data, 4), cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
  assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
  assert f"resumed from {wd} at step" in out.stdout
  resumed = int(out.stdout.split(f"resumed from {wd} at step ")[1].split()[0])
  assert resumed >= 2, out.stdout
  for x, y in zip(jax.tree.leaves(_saved_params(wd, 4)), jax.tree.leaves(dis.state.params),
                  strict=True):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=0, atol=1e-6)


@pytest.mark.parametrize("config", ["tis", "sc"])
def test_staleness_is_the_mismatch_the_corrections_see(tmp_path, config):
  """TIS / Score Centering with copy none: at k = 1 the sampler's q (version t - 1) differs
  from the trainer's p, at k = 0 they agree to float noise."""
  kl = {}
  for k in ((0, 1) if config == "tis" else (1,)):  # k = 0 once: the same sampler and trainer
    _, _, m = _run(tmp_path, f"k{k}", 2, config=config, copy="none", max_staleness=k,
                   **DISAGG)
    kl[k] = [x["mismatch/kl_q_p"] for x in m]
  assert max(abs(x) for x in kl.get(0, [0.0])) <= 1e-6, kl
  assert kl[1][0] <= 1e-6 and kl[1][1] > 1e-4, kl


def test_pipeline_versions_and_resume():
  """Batch t from version max(0, t - k); a resumed pipeline launches what an uninterrupted one
  would; the threaded schedule draws the same batches in the same order."""
  for overlap in (False, True):
    log = []
    draw = lambda b, s: (log.append((b, s)), pipe.Rollouts(None, None, None, {}))[1]
    p = pipe.RolloutPipeline(draw, lambda step: (f"v{step}", step), lag=2, overlap=overlap)
    p.start(0)
    got = []
    for t in range(5):
      d, _ = p.get(t)
      got.append((d.batch, d.version))
    p.drain()
    assert got == [(0, 0), (1, 0), (2, 0), (3, 1), (4, 2)], got
    assert sorted(log) == [(0, "v0"), (1, "v0"), (2, "v0"), (3, "v1"), (4, "v2"), (5, "v3"),
                           (6, "v4")]
    assert [d.batch for d in p.in_flight()] == [5, 6]
    p.close()
    q = pipe.RolloutPipeline(draw, lambda step: (f"v{step}", step), lag=2, overlap=overlap)
    log.clear()
    q.start(5, p.in_flight())
    assert q.get(5)[0].version == 3 and log == [(7, "v5")]
    q.close()
  with pytest.raises(ValueError, match="saved rollout batches are"):
    pipe.RolloutPipeline(draw, None, lag=1).start(3, p.in_flight())


def test_pipeline_stop_draws_nothing_past_the_last_step():
  for overlap in (False, True):
    log = []
    draw = lambda b, s: (log.append((b, s)), pipe.Rollouts(None, None, None, {}))[1]
    p = pipe.RolloutPipeline(draw, lambda step: (f"v{step}", step), lag=2, overlap=overlap,
                             stop=4)
    p.start(0)
    assert [p.get(t)[0].version for t in range(4)] == [0, 0, 0, 1]
    p.drain()
    assert sorted(log) == [(0, "v0"), (1, "v0"), (2, "v0"), (3, "v1")], log
    assert p.in_flight() == []
    with pytest.raises(ValueError, match="stops at batch 4"):
      p.get(4)
    p.close()


def test_sampler_thread_error_reaches_the_learner():
  def draw(b, s):
    if b == 1:
      raise RuntimeError("reward server down")
    return pipe.Rollouts(None, None, None, {})
  p = pipe.RolloutPipeline(draw, lambda step: (None, step), lag=1, overlap=True)
  p.start(0)
  p.get(0)
  with pytest.raises(RuntimeError, match="reward server down"):
    p.get(1)
  p.close()


def test_in_flight_batches_round_trip():
  from rljax.loop.prompts import Prompts
  from rljax.rollout import Rollout
  rng = np.random.default_rng(0)
  r = Rollout(rng.integers(0, 9, (4, 3)), np.ones((4, 3), np.int32), np.zeros(4, bool),
              rng.normal(size=(4, 3)).astype(np.float32), None, None,
              rng.integers(0, 9, (4, 5)), np.ones((4, 5), np.int32))
  roll = pipe.Rollouts(r=r, prompts=Prompts(r.prompt_ids_BxP[::2], r.prompt_mask_BxP[::2]),
                       rewards=np.arange(4.0), info={"term/a": np.ones(4), "accuracy":
                                                     np.arange(4.0)},
                       keep_groups=np.array([True, False]), resample_tries=2)
  tree, spec = pipe.to_tree([pipe.Drawn(batch=7, version=6, roll=roll)])
  import json
  spec = json.loads(json.dumps(spec))
  (back,) = pipe.from_tree(tree, spec)
  assert (back.batch, back.version, back.roll.resample_tries) == (7, 6, 2)
  for a, b in zip(r, back.roll.r):
    assert (a is None and b is None) or np.array_equal(a, b)
  assert back.roll.prompts.minus_ids is None
  np.testing.assert_array_equal(back.roll.info["term/a"], np.ones(4))
  np.testing.assert_array_equal(back.roll.keep_groups, [True, False])
  assert jax.tree.map(np.shape, pipe.abstract_tree(spec)) == jax.tree.map(np.shape, tree)
