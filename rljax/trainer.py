"""The RL loop: data -> rollout -> rewards -> advantages -> (scoring) -> train step(s)
-> metrics -> checkpoint -> held-out eval.

Everything here is host-side glue; the numerics live in `train_step`, the
objectives, the sampler and the rewards. `Trainer(cfg, workdir).run()` resumes
from the newest checkpoint in `workdir` when there is one; SIGTERM (TPU
preemption) saves at the end of the current step and exits cleanly.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
import warnings

import jax
import jax.numpy as jnp
import ml_collections as mlc
import numpy as np
from flax import nnx

from rljax import distributed as dist
from rljax import paths
from rljax import sharding as shd
from rljax.checkpointing import RunCheckpointer
from rljax.config_check import objective_kwargs, sampler_config, validate_config
from rljax.metrics_log import MetricsWriter
from rljax.objectives import build_objective, informative_groups, overlong_penalty
from rljax.rollout import SamplerSync, generate
from rljax.train_step import StepConfig, init_state, jit_train_step, make_optimizer
from rljax.update import jit_update_batch
from rljax.workdir import check_compatible, finished_metrics, latest_saved_step


class TrainingAborted(RuntimeError):
  """Raised (non-zero exit) after too many consecutive skipped updates; the last good
  state is checkpointed first."""


def left_pad(rows: list[list[int]], length: int, pad_id: int, what: str, key: str):
  """[B, length] ids and mask, left-padded; a clear error when a row does not fit."""
  ids = np.full((len(rows), length), pad_id, np.int32)
  mask = np.zeros((len(rows), length), np.int32)
  for i, r in enumerate(rows):
    if len(r) > length:
      raise ValueError(f"{what} row {i} has {len(r)} tokens > {key}={length}; raise {key}")
    ids[i, length - len(r):], mask[i, length - len(r):] = r, 1
  return ids, mask


def bucket_len(longest: int, bucket: int, cap: int) -> int:
  """The padded prompt length for a batch whose longest prompt has `longest` tokens:
  rounded up to a multiple of `bucket` (0: no bucketing, always `cap`), at most `cap`."""
  if not bucket:
    return cap
  return min(cap, max(1, -(-longest // bucket)) * bucket)


def trim_left(arrays, length: int):
  """Keeps the last `length` columns (the last axis) of left-padded arrays."""
  return tuple(a[..., a.shape[-1] - length:] for a in arrays)


def left_pad_to(a, length: int):
  """Left-pads the last axis of `a` with zeros (masked pad) up to `length`."""
  a = np.asarray(a)
  if a.shape[-1] >= length:
    return a
  return np.pad(a, [(0, 0)] * (a.ndim - 1) + [(length - a.shape[-1], 0)])


def build_step_parts(cfg: mlc.ConfigDict, vocab_size: int):
  """(objective, optimizer, StepConfig) of a run: what the trainer steps with and what
  `rljax.aot` compiles."""
  from rljax.data import criteria_ids
  t, r, o, opt = cfg.train, cfg.rollout, cfg.objective, cfg.optim
  objective = build_objective(**objective_kwargs(cfg, vocab_size))
  optimizer = make_optimizer(opt.lr, weight_decay=opt.weight_decay, b1=opt.b1, b2=opt.b2,
                             eps=opt.eps, grad_clip=opt.grad_clip,
                             warmup_steps=opt.warmup_steps, total_steps=t.steps,
                             schedule=opt.schedule)
  step_cfg = StepConfig(
      objective=objective, response_len=r.max_new_tokens,
      temperature=float(r.temperature) or 1.0, top_k=r.top_k if t.truncate_logprobs else 0,
      top_p=float(r.top_p) if t.truncate_logprobs else 1.0, chunk_size=t.logprob_chunk,
      replay=any(n.startswith("cort") for n in o.transforms),
      fused_scoring=t.inner_epochs == 1 and t.num_minibatches == 1,
      # record_topk -1 ('full'): the whole distribution, scored at every vocabulary id
      head_k=vocab_size if r.record_topk == -1 else r.record_topk, use_ref=bool(t.ref_model),
      replay_policy=o.replay_policy, replay_mode=o.replay_mode,
      num_criteria_ids=len(criteria_ids()))
  return objective, optimizer, step_cfg


def _numeric_rows(value, n: int):
  """`value` as a numeric array with one entry per response, else None (reward info may hold
  ragged per-response lists, e.g. the instruction ids each response followed)."""
  if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != n:
    return None
  try:
    arr = np.asarray(value)
  except ValueError:  # ragged
    return None
  return arr if arr.ndim and arr.dtype.kind in "biuf" else None


class Trainer:
  def __init__(self, cfg: mlc.ConfigDict, workdir: str):
    self.cfg, self.workdir = cfg, os.fspath(workdir)
    for w in validate_config(cfg, jax.device_count()):
      warnings.warn(w)
    paths.check_writable(self.workdir)
    check_compatible(cfg, self.workdir)  # before anything in the workdir is overwritten
    self._finished = finished_metrics(self.workdir, cfg.train.steps,
                                      latest_saved_step(self.workdir))
    if self._finished is not None:  # a finished run: nothing to build, its results are kept
      return
    self.mesh = shd.make_mesh(tuple(cfg.mesh.shape))
    dist.check_batch(cfg.data.batch_size, self.mesh)  # before anything compiles
    if dist.is_writer():  # one writer; the others meet it at the barrier below
      paths.write_text(os.path.join(self.workdir, "config.json"),
                       cfg.to_json_best_effort(indent=2))
    self._build_model()
    self._build_data()
    self._build_objective_and_steps()
    self.ckpt = RunCheckpointer(os.path.join(self.workdir, "checkpoints"),
                                keep=cfg.checkpoint.keep,
                                best_metric=cfg.checkpoint.best_metric or None,
                                async_save=cfg.checkpoint.async_save)
    self.log = MetricsWriter(self.workdir, tensorboard=cfg.log.tensorboard,
                             total_steps=cfg.train.steps, active=dist.is_writer())
    self._stop = False
    self._consecutive_skips = 0

  # ------------------------------------------------------------------------- setup
  def _build_model(self):
    from rljax.models import create_model, load_model
    from rljax.models.bundled import resolve
    from rljax.models.config import ModelConfig
    from rljax.models.tokenizer import load_tokenizer
    c = self.cfg.model
    self.tokenizer = load_tokenizer(resolve(c.tokenizer or c.path))
    eos = self.tokenizer.eos_token_id
    if c.tiny:
      mcfg = ModelConfig(vocab_size=len(self.tokenizer), eos_token_id=eos,
                         param_dtype=c.param_dtype, dtype=c.dtype,
                         attention=c.get("attention", "dense"), **c.tiny_config.to_dict())
      model = create_model(mcfg, mesh=self.mesh, seed=self.cfg.seed, remat=c.remat)
    else:
      model = load_model(resolve(c.path), mesh=self.mesh, remat=c.remat,
                         param_dtype=c.param_dtype, dtype=c.dtype,
                         attention=c.get("attention", "dense"))
    if jax.default_backend() == "cpu":  # unrolled layers: a faster step, a longer compile
      model.scan_unroll = model.cfg.num_layers
    self.model_cfg = model.cfg
    k = self.cfg.rollout.record_topk
    if k > self.model_cfg.vocab_size:
      raise ValueError(f"config.rollout.record_topk={k} exceeds the vocabulary "
                       f"({self.model_cfg.vocab_size})")
    self.graphdef, params = nnx.split(model)
    self.params = nnx.to_pure_dict(params)
    self.pad_id = self.tokenizer.pad_token_id or 0
    self.sampler_cfg = sampler_config(self.cfg, stop_ids=(eos,), pad_id=self.pad_id)

  def _build_data(self):
    from rljax.data import GroupBatcher, ShardedIterator
    from rljax.data.run_data import eval_file_examples, sources
    from rljax.rewards.from_config import build_reward
    d = self.cfg.data
    # array_record data needs a local disk: a bucket workdir keeps it in a local cache
    data_dir = d.data_dir or (paths.local_cache_dir("tfds") if paths.is_remote(self.workdir)
                              else os.path.join(self.workdir, "tfds"))
    train, held, self.decode = dist.writer_first(
        "data", lambda: sources(d, self.cfg.seed, data_dir))
    # the global stream of record indices (the same on every process, and the same as on
    # one process); each process decodes only the prompts its devices hold (`_rollout`)
    self.train_source = train
    it = ShardedIterator(range(len(train)), seed=self.cfg.seed)
    self.batches = GroupBatcher(it, d.batch_size, self.cfg.rollout.num_generations)
    if self.cfg.eval.get("path", ""):
      self.eval_examples = eval_file_examples(self.cfg.eval.path, self.cfg.eval.num_prompts)
    else:
      n = 0 if held is None else min(self.cfg.eval.num_prompts, len(held))
      self.eval_examples = [self.decode(held[i]) for i in range(n)]
    self.reward_fn = build_reward(self.cfg.reward)

  def _build_objective_and_steps(self):
    cfg, t = self.cfg, self.cfg.train
    self.objective, self.optimizer, self.step_cfg = build_step_parts(
        cfg, self.model_cfg.vocab_size)
    self.state = shd.init_sharded(  # optimizer moments sharded like their params
        lambda p: init_state(p, self.optimizer, self.objective), self.params, self.mesh)
    o, r = cfg.objective, cfg.rollout
    replay = self.step_cfg.replay
    need_ref = bool(t.ref_model) or (replay and o.replay_policy == "ref")
    self.ref_params = jax.tree.map(jnp.copy, self.params) if need_ref else None
    from rljax.data import criteria_ids
    self.criterion_ids = tuple(criteria_ids())
    state_sh = jax.tree.map(lambda x: x.sharding, self.state)
    ref_sh = None if self.ref_params is None else jax.tree.map(lambda x: x.sharding,
                                                               self.ref_params)
    self._batch_sh = lambda b: {k: shd.batch_sharding(self.mesh, v.ndim) for k, v in b.items()}
    self._jits: dict = {}
    self._make_step = lambda b: jit_train_step(
        self.graphdef, self.optimizer, self.step_cfg, t.grad_accum, state_sh,
        self._batch_sh(b), ref_sh, shd.replicated(self.mesh))
    self._make_update = lambda b: jit_update_batch(
        self.graphdef, self.optimizer, self.step_cfg, epochs=t.inner_epochs,
        num_minibatches=t.num_minibatches, grad_accum=t.grad_accum, state_shardings=state_sh,
        batch_shardings=self._batch_sh(b), ref_shardings=ref_sh,
        replicated=shd.replicated(self.mesh))
    self.sync = SamplerSync(r.copy, every=r.sync_every)

  # ------------------------------------------------------------------------- pieces
  def _tokenize(self, examples):
    from rljax.data import format_chat
    system = self.cfg.data.system or None
    pairs = [format_chat(ex, self.tokenizer, system) for ex in examples]
    enc = lambda texts: [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    d = self.cfg.data
    plus = left_pad(enc([a for a, _ in pairs]), d.max_prompt_len, self.pad_id,
                    "rubric prompt x+", "data.max_prompt_len")
    minus = left_pad(enc([b for _, b in pairs]), d.max_replay_prompt_len, self.pad_id,
                     "rubric-free prompt x-", "data.max_replay_prompt_len")
    if self.step_cfg.replay_mode == "per_criterion":
      minus = minus + self._tokenize_ablations(examples)
    # Prompt bucketing: drop the left-padding columns no row of the (global) batch needs,
    # keeping a multiple of data.prompt_bucket, so the sampler and the step see the
    # batch's lengths, not the maxima (numerically the same: pad keys are masked out).
    bucket = d.get("prompt_bucket", 0)
    fit = lambda mask, cap: bucket_len(dist.max_over_processes(int(mask.sum(-1).max(initial=0))),
                                       bucket, cap)
    plus = trim_left(plus, fit(plus[1], d.max_prompt_len))
    minus = (trim_left(minus[:2], fit(minus[1], d.max_replay_prompt_len))
             + (trim_left(minus[2:4], fit(minus[3], d.max_prompt_len)) + minus[4:]
                if len(minus) > 2 else ()))
    return plus, minus

  def _tokenize_ablations(self, examples):
    """Per-criterion replay prompts (x⁺ minus criterion j): ids, mask [P, C, L] and the
    criterion ids [P, C] (−1 where an example has fewer than C = data.max_criteria)."""
    from rljax.data import ablations, chat_prompt
    d, system = self.cfg.data, self.cfg.data.system or None
    c = d.max_criteria
    ids = np.full((len(examples), c, d.max_prompt_len), self.pad_id, np.int32)
    mask = np.zeros_like(ids)
    cid = np.full((len(examples), c), -1, np.int32)
    for i, ex in enumerate(examples):
      for j, text in enumerate(ablations(ex)[:c]):
        row = self.tokenizer(chat_prompt(text, self.tokenizer, system),
                             add_special_tokens=False)["input_ids"]
        ids[i, j], mask[i, j] = (a[0] for a in left_pad([row], d.max_prompt_len, self.pad_id,
                                                         "per-criterion replay prompt",
                                                         "data.max_prompt_len"))
        cid[i, j] = self.criterion_ids.index(ex["instruction_id_list"][j])
    return ids, mask, cid

  def _rollout(self, step: int, indices, key):
    """Rollout of the global batch of prompts `indices`. Each process reads and tokenizes
    the prompts its devices hold and scores its own rows; every process ends with the
    whole rollout as numpy (gathered), the same as on one process."""
    g, n_p = self.cfg.rollout.num_generations, len(indices)
    (ids, mask), minus = self._tokenize([self.decode(self.train_source[int(i)])
                                         for i in indices[self._prompt_rows(n_p)]])
    sampler = self.sync.params(step, nnx.merge(self.graphdef, self.state.params))
    r, minus = self._generate(sampler, ids, mask, minus, key, self.sampler_cfg, n_p)
    rows = dist.local_rows_of(self.mesh, r.tokens_BxN.shape)
    tokens, rmask = r.tokens_BxN[rows], r.mask_BxN[rows]
    texts = self.tokenizer.batch_decode([row[m > 0] for row, m in zip(tokens, rmask)],
                                        skip_special_tokens=True)
    examples = {int(i): None for i in np.arange(rows.start, rows.stop) // g}
    examples = {i: self.decode(self.train_source[int(indices[i])]) for i in examples}
    rewards, info = self.reward_fn(texts, [examples[i // g] for i in range(rows.start,
                                                                             rows.stop)],
                                   num_threads=self.cfg.reward.num_threads)
    full = rows == slice(0, len(r.tokens_BxN))
    rewards = dist.gather_local(np.asarray(rewards, np.float32), full)
    info = {k: dist.gather_local(a, full) for k, a in
            ((k, _numeric_rows(v, len(texts))) for k, v in info.items()) if a is not None}
    info = dict(info, accuracy=rewards.copy())  # before shaping: what dynamic sampling reads
    cache = self.cfg.objective.overlong_cache
    if cache:  # DAPO soft overlong punishment, counted in tokens
      info = dict(info, overlong_penalty=np.asarray(overlong_penalty(
          jnp.asarray(r.mask_BxN.sum(1)), self.cfg.rollout.max_new_tokens, cache)))
      rewards = rewards + info["overlong_penalty"]
    return dict(r=r, plus=(r.prompt_ids_BxP[::g], r.prompt_mask_BxP[::g]),
                minus=minus, rewards=rewards, info=info,
                examples=[examples[i // g] for i in range(rows.start, rows.stop)])

  def _prompt_rows(self, num_prompts: int) -> slice:
    return dist.local_rows_of(self.mesh, (num_prompts, self.cfg.data.max_prompt_len))

  def _generate(self, sampler, ids, mask, minus, key, cfg, num_prompts):
    """Host-local prompt rows -> global arrays -> generate -> the whole rollout as numpy
    on every process (plus the x- prompts, gathered alongside)."""
    block = self._prompt_rows(num_prompts)
    keys = dist.key_data_rows(key, num_prompts, block)  # = split(key, prompts)[block]
    g_ids, g_mask, g_keys = dist.to_global((ids, mask, keys), self.mesh, num_prompts)
    r = generate(sampler, g_ids, g_mask, g_keys, cfg, mesh=self.mesh)
    if minus is not None:
      minus = dist.gather(dist.to_global(minus, self.mesh, num_prompts))
    return dist.gather(r), minus

  def _assemble(self, roll) -> dict:
    g = self.cfg.rollout.num_generations
    r = roll["r"]
    rep = lambda a: np.repeat(a, g, axis=0)
    resp, rmask = np.asarray(r.tokens_BxN, np.int32), np.asarray(r.mask_BxN, np.int32)
    (pi, pm), (mi, mm) = roll["plus"], roll["minus"][:2]
    adv, _ = self.objective.advantages(jnp.asarray(roll["rewards"]))
    keep_B = np.repeat(roll.get("keep_groups", np.ones(len(pi), bool)), g)
    # groups still uninformative after resampling are dropped: out of the loss mask (and so
    # of every normalizer count), advantage 0
    batch = {"tokens_BxL": np.concatenate([rep(pi), resp], 1),
             "attn_mask_BxL": np.concatenate([rep(pm), rmask], 1),
             "mask_BxN": (rmask * keep_B[:, None]).astype(np.float32),
             "adv_B": np.asarray(adv, np.float32) * keep_B,
             "sampler_logp_BxN": np.asarray(r.logq_BxN, np.float32)}
    if self.step_cfg.replay:
      batch["minus_tokens_BxM"] = np.concatenate([rep(mi), resp], 1)
      batch["minus_attn_mask_BxM"] = np.concatenate([rep(mm), rmask], 1)
    if self.step_cfg.replay_mode == "per_criterion":
      ci, cm, cid = roll["minus"][2:]
      c = ci.shape[1]
      rep_c = lambda a: np.repeat(a[:, None], c, 1)  # response [B, N] -> [B, C, N]
      batch["crit_tokens_BxCxL"] = np.concatenate([rep(ci), rep_c(resp)], 2)
      batch["crit_attn_mask_BxCxL"] = np.concatenate([rep(cm), rep_c(rmask)], 2)
      batch["crit_id_BxC"] = rep(cid)
    if self.step_cfg.head_k:
      batch["head_ids_BxNxK"] = np.asarray(r.topk_ids_BxNxK, np.int32)
      batch["head_logq_BxNxK"] = np.asarray(r.topk_logq_BxNxK, np.float32)
    return batch

  def _collect(self, step: int, key):
    """One rollout batch. DAPO dynamic sampling judges a group by its accuracy reward
    (before the overlong shaping, as verl's recipe): uninformative groups are replaced by
    informative ones of up to `max_resample` extra rollouts; those still uninformative
    are dropped (masked out of the loss and its normalizer) and counted."""
    o, g = self.cfg.objective, self.cfg.rollout.num_generations
    roll = self._rollout(step, np.asarray(next(self.batches)["prompts"]), key)
    if not o.dynamic_sampling:
      return roll, 0
    tries = 0
    informative = lambda r: np.asarray(informative_groups(jnp.asarray(r["info"]["accuracy"]), g))
    keep = informative(roll)
    while not keep.all() and tries < o.max_resample:
      tries += 1
      extra = self._rollout(step, np.asarray(next(self.batches)["prompts"]),
                            jax.random.fold_in(key, 1000 + tries))
      roll, keep = _refill(roll, keep, extra, informative(extra), g)
    roll["keep_groups"] = keep
    return roll, tries

  def _update(self, step: int, batch):
    """The optimizer update(s) for one rollout batch: the fused step when μ = 1, else
    `update_batch` (score once, transforms once, a device-side scan over mini-batches of
    whole groups). Returns (state, host metrics)."""
    batch = dist.put_global(batch, self._batch_sh(batch))
    name = "step" if self.step_cfg.fused_scoring else "update"
    if name not in self._jits:
      self._jits[name] = (self._make_step if name == "step" else self._make_update)(batch)
    if name == "step":
      state, metrics = self._jits[name](self.state, batch, self.ref_params)
    else:
      key = jax.random.fold_in(jax.random.key(self.cfg.seed + 7919), step)
      state, metrics = self._jits[name](self.state, batch, self.ref_params, key)
    return state, self._host_metrics(jax.device_get(metrics))

  def _host_metrics(self, metrics: dict) -> dict:
    """Scalars as floats; per-criterion Δ sums expanded to `cort/delta/<criterion id>`."""
    sums, counts = metrics.pop("cort/crit_delta_sum_I", None), metrics.pop("cort/crit_count_I",
                                                                             None)
    out = {k: float(v) for k, v in metrics.items()}
    if sums is not None:
      for name, s, c in zip(self.criterion_ids, np.asarray(sums), np.asarray(counts)):
        if c > 0:
          out[f"cort/delta/{name}"] = float(s / c)
    return out

  def _check_skips(self, done: int, metrics: dict) -> None:
    """Aborts (after saving the last good state) once `train.max_consecutive_skips`
    updates in a row were skipped for a non-finite loss or gradient."""
    n_upd = metrics.get("actor/num_updates", 1.0)
    skipped = metrics.get("actor/update_skipped", 0.0)
    self._consecutive_skips = (self._consecutive_skips + int(skipped) if skipped >= n_upd
                               else int(skipped))  # a partly skipped batch ends the run of skips
    metrics["actor/consecutive_skips"] = float(self._consecutive_skips)
    limit = self.cfg.train.max_consecutive_skips
    if limit and self._consecutive_skips >= limit:
      self._save(done, metrics)
      raise TrainingAborted(
          f"aborting at step {done}: {self._consecutive_skips} consecutive updates were "
          f"skipped (non-finite loss or gradient; limit train.max_consecutive_skips={limit}). "
          f"Check the rewards for NaN and the learning rate (optim.lr={self.cfg.optim.lr}). "
          f"The last good state is saved in {self.workdir}/checkpoints")

  # ------------------------------------------------------------------------- eval / ckpt
  def evaluate(self, step: int | None = None) -> dict:
    from rljax.rewards.evaluation import heldout_metrics, sample_rows
    if not self.eval_examples:
      return {}
    (ids, mask), _ = self._tokenize(self.eval_examples)
    cfg = self.sampler_cfg.replace(temperature=0.0, num_generations=1, record_topk=0)
    block = self._prompt_rows(len(ids))
    r, _ = self._generate(nnx.merge(self.graphdef, self.state.params), ids[block],
                          mask[block], None, jax.random.key(0), cfg, len(ids))
    texts = self.tokenizer.batch_decode([row[m > 0] for row, m in zip(r.tokens_BxN,
                                                                      r.mask_BxN)],
                                        skip_special_tokens=True)
    out = heldout_metrics(self.eval_examples, texts, self.reward_fn)
    if step is not None and self.cfg.eval.get("num_samples", 4):
      self.log.samples(step, sample_rows(self.eval_examples, texts, self.reward_fn,
                                         self.cfg.eval.get("num_samples", 4)))
    return {f"eval/{k}": v for k, v in out.items() if isinstance(v, (int, float))}

  def token_weight_heatmap(self, batch: dict, roll: dict, num_show: int = 4) -> dict:
    """CoRT's token credit on the last rollout batch, scored by the final policy: the
    weight w̃ = Â/A that the objective's token transforms give each response token (the
    replay forward and the transform chain of the step, run with A = 1), with Δ = ℓ⁺ − ℓ⁻.
    Writes `plots/cort_weights.png` (the `num_show` best-rewarded responses of distinct
    groups, tokens coloured by w̃) and `cort_weights.json`; returns the JSON record."""
    from rljax.plot import token_heatmap
    from rljax.train_step import apply_transforms, score_batch
    sc = dataclasses.replace(self.step_cfg, fused_scoring=False)
    ones = dict(batch, adv_B=np.ones_like(batch["adv_B"]))
    graphdef = self.graphdef

    def weights(state, b, ref):
      scores = score_batch(graphdef, state.params, b, sc, ref)
      w, _, m = apply_transforms(state.transform_state, b, scores, sc)
      lam = [v for k, v in m.items() if k.endswith("lambda")]
      return w, scores["plus_logp_BxN"] - scores["minus_logp_BxN"], (lam or [jnp.nan])[0]

    w, delta, lam = dist.gather(jax.jit(weights)(
        self.state, dist.put_global(ones, self._batch_sh(ones)), self.ref_params))
    if not dist.is_writer():
      return {}
    g, n = self.cfg.rollout.num_generations, batch["mask_BxN"].shape[1]
    mask, rewards = batch["mask_BxN"] > 0, np.asarray(roll["rewards"])
    best = [grp * g + int(np.argmax(rewards[grp * g:(grp + 1) * g]))
            for grp in range(len(rewards) // g)]
    best = sorted((i for i in best if mask[i].any()), key=lambda i: -rewards[i])[:num_show]
    examples = roll.get("examples") or []
    rows = []
    for i in best:
      ids = [int(t) for t in batch["tokens_BxL"][i, -n:][mask[i]]]
      ex = examples[i] if i < len(examples) else {}
      crit = ", ".join(c.split(":")[-1] for c in ex.get("instruction_id_list", []))
      rows.append({"row": int(i), "reward": float(rewards[i]), "criteria": crit, "ids": ids,
                   "tokens": [self.tokenizer.decode([t]) for t in ids],
                   "w": [float(x) for x in w[i][mask[i]]],
                   "delta": [float(x) for x in delta[i][mask[i]]]})
    rec = {"step": int(self.cfg.train.steps), "lambda": float(lam), "rows": rows}
    paths.write_text(os.path.join(self.workdir, "cort_weights.json"), json.dumps(rec))
    token_heatmap([{"title": f"row {r['row']}  reward {r['reward']:.2f}" + (
        f"  criteria: {r['criteria']}" if r["criteria"] else ""), "tokens": r["tokens"],
                    "values": r["w"]} for r in rows],
                  os.path.join(self.workdir, "plots", "cort_weights.png"),
                  label=f"CoRT token weight w̃ = Â/A after the final step (λ = {float(lam):.2f}; "
                  "dimensionless)")
    return rec

  def _eval_at_start(self) -> None:
    """Held-out eval of the initial policy, logged as step 0: the baseline of the curve."""
    t0 = time.time()
    ev = self.evaluate(step=0)
    if not ev:
      return
    ev["time/eval"] = time.time() - t0
    self.log.write(0, ev)
    if dist.is_writer():
      shown = "  ".join(f"{k.split('/', 1)[1]} {ev[k]:.3g}" for k in (
          "eval/reward_mean", "eval/prompt_level_strict", "eval/instruction_level_strict")
          if k in ev)
      print(f"[before training] held-out {shown}  ({ev['time/eval']:.0f}s)", flush=True)

  def _meta(self, step: int, metrics: dict) -> dict:
    return {"step": step, "seed": self.cfg.seed, "data": self.batches.get_state(),
            "sampler_sync": self.sync.state_dict(),
            "metrics": {k: float(v) for k, v in metrics.items() if np.isscalar(v)
                        or getattr(v, "ndim", 1) == 0}}

  def _ckpt_tree(self, state, sampler_state=None) -> dict:
    """What is saved: the train state, and a stale sampler's snapshot (it differs from the
    trainer's params between syncs, so resuming without it would not be exact)."""
    tree = {"train": state}
    if sampler_state is not None:
      tree["sampler"] = nnx.to_pure_dict(sampler_state)
    return tree

  def _save(self, step: int, metrics: dict, eval_metrics=None):
    held = self.sync.held() if self.sync.every > 1 else None
    tree = self._ckpt_tree(self.state, None if held is None else held[1])
    self.ckpt.save(step, tree, self._meta(step, metrics), eval_metrics)

  def _restore(self) -> int:
    if self.ckpt.latest_step() is None:
      return 0
    held = None
    if self.sync.every > 1:  # the snapshot's structure: a fresh copy of the trainer
      from rljax.rollout import make_sampler_params
      held = make_sampler_params(nnx.merge(self.graphdef, self.state.params), self.sync.copy,
                                 force_copy=True)
    tree, meta = self.ckpt.restore(self._ckpt_tree(self.state, None if held is None
                                                   else held[1]))  # newest readable step
    latest = int(meta["step"])
    self.state = tree["train"]
    self.batches.set_state(meta["data"])
    self.sync.load_state_dict(meta["sampler_sync"])
    if held is not None:
      state = held[1]
      nnx.replace_by_pure_dict(state, tree["sampler"])
      self.sync.restore_held((held[0], state))
    print(f"resumed from {self.workdir} at step {latest}", flush=True)
    return int(latest)

  # ------------------------------------------------------------------------- loop
  def run(self) -> dict:
    cfg = self.cfg
    if self._finished is not None:  # a rerun of a finished run is a no-op
      print(f"{self.workdir}: already finished (train.steps={cfg.train.steps}); results kept. "
            "Raise --config.train.steps to continue, or use a new --workdir.", flush=True)
      return self._finished
    start = self._restore()
    # steps after the checkpoint are rewritten, not doubled (a fresh run: everything)
    self.log.truncate_after(start if start else -1)
    if start == 0 and cfg.eval.get("at_start", False):
      self._eval_at_start()
    prev = signal.signal(signal.SIGTERM, lambda *_: setattr(self, "_stop", True))
    key = jax.random.key(cfg.seed)
    metrics: dict = {}
    last = None
    try:
      for step in range(start, cfg.train.steps):
        t0 = time.time()
        roll, tries = self._collect(step, jax.random.fold_in(key, step))
        t1 = time.time()
        batch = self._assemble(roll)
        self.state, step_metrics = self._update(step, batch)
        last = (batch, roll)
        t2 = time.time()
        metrics = {**step_metrics, **_rollout_metrics(roll, batch),
                   "rollout/lag": self.sync.lag(step), "rollout/resample_tries": tries,
                   "time/rollout_and_reward": t1 - t0, "time/train": t2 - t1}
        done = step + 1
        self._stop = dist.any_process(self._stop)  # every process stops at the same step
        self._check_skips(done, metrics)
        ev = None
        if (cfg.eval.every and done % cfg.eval.every == 0) or done == cfg.train.steps:
          t3 = time.time()
          ev = self.evaluate(step=done)
          metrics.update(ev, **{"time/eval": time.time() - t3})
        if self._stop or done == cfg.train.steps or (
            cfg.checkpoint.every and done % cfg.checkpoint.every == 0):
          self._save(done, metrics, ev)
        metrics["time/step"] = time.time() - t0
        metrics["throughput/tokens_per_s"] = float(batch["attn_mask_BxL"].sum()) / max(
            metrics["time/step"], 1e-9)
        self.log.write(done, metrics)
        self.log.console(done, metrics)
        if self._stop:
          print(f"SIGTERM: saved step {done} to {self.workdir}; exiting", flush=True)
          break
    finally:
      signal.signal(signal.SIGTERM, prev)
      self.log.close()
      self.ckpt.close()
    if cfg.log.plot and not self._stop and self.step_cfg.replay and last is not None:
      self.token_weight_heatmap(*last)
    if dist.is_writer():
      if cfg.log.plot and not self._stop:
        from rljax.plot import plot_runs
        plot_runs([self.workdir], os.path.join(self.workdir, "plots"))
      paths.write_text(os.path.join(self.workdir, "final_metrics.json"),
                       json.dumps(metrics, indent=2))
    dist.barrier("run_end")
    return metrics


def _rollout_metrics(roll, batch) -> dict:
  r, info = roll["r"], roll["info"]
  mask = batch["mask_BxN"]
  out = {"reward/mean": float(np.mean(roll["rewards"])),
         "reward/std": float(np.std(roll["rewards"])),
         "response/length_mean": float(mask.sum(1).mean()),
         "response/length_clip_ratio": float(np.mean(np.asarray(r.truncated_B))),
         # x+ columns after prompt bucketing (data.prompt_bucket)
         "rollout/prompt_len": float(batch["tokens_BxL"].shape[1] - mask.shape[1])}
  for k in ("csr", "aon", "overlong_penalty", "accuracy"):
    if k in info:
      out[f"reward/{k}"] = float(np.mean(info[k]))
  if "keep_groups" in roll:
    out["rollout/dropped_groups"] = float(np.sum(~np.asarray(roll["keep_groups"])))
  return out


def _refill(roll, keep, extra, ekeep, g):
  """Replaces uninformative groups of `roll` by informative ones of `extra`."""
  bad = [i for i, k in enumerate(keep) if not k]
  good = [i for i, k in enumerate(ekeep) if k]
  roll, extra = _common_prompt_lens(roll, extra)
  roll.pop("examples", None)  # rows were replaced: this host's example list is stale
  for dst, src in zip(bad, good):
    sl_d, sl_s = slice(dst * g, (dst + 1) * g), slice(src * g, (src + 1) * g)
    r, e = roll["r"], extra["r"]
    roll["r"] = r._replace(**{f: _put(getattr(r, f), getattr(e, f), sl_d, sl_s)
                              for f in r._fields if getattr(r, f) is not None})
    roll["rewards"] = _put(roll["rewards"], extra["rewards"], sl_d, sl_s)
    roll["info"] = {k: (_put(v, extra["info"][k], sl_d, sl_s) if isinstance(v, np.ndarray)
                        and v.shape[:1] == roll["rewards"].shape else v)
                    for k, v in roll["info"].items()}
    for side in ("plus", "minus"):  # (with per-criterion replay, minus also holds those)
      roll[side] = tuple(_put(a, b, slice(dst, dst + 1), slice(src, src + 1))
                         for a, b in zip(roll[side], extra[side]))
    keep = keep.copy()
    keep[dst] = True
  return roll, keep


def _common_prompt_lens(a, b):
  """Two rollouts whose prompts were bucketed to different lengths, left-padded to the
  longer of each pair (x+, x-, per-criterion x-) so their rows can be exchanged."""
  a, b = dict(a), dict(b)
  plus = max(a["plus"][0].shape[-1], b["plus"][0].shape[-1])
  for d in (a, b):
    d["r"] = d["r"]._replace(prompt_ids_BxP=left_pad_to(d["r"].prompt_ids_BxP, plus),
                             prompt_mask_BxP=left_pad_to(d["r"].prompt_mask_BxP, plus))
    d["plus"] = tuple(left_pad_to(x, plus) for x in d["plus"])
  for lo, hi in ((0, 2), (2, 4)):
    if len(a["minus"]) >= hi:
      n = max(a["minus"][lo].shape[-1], b["minus"][lo].shape[-1])
      for d in (a, b):
        m = list(d["minus"])
        m[lo:hi] = [left_pad_to(x, n) for x in m[lo:hi]]
        d["minus"] = tuple(m)
  return a, b


def _put(dst, src, sl_d, sl_s):
  dst = np.array(dst)
  dst[sl_d] = np.asarray(src)[sl_s]
  return dst
