"""The RL loop, as the papers write it:

    for step in range(start, steps):
      rollouts = pipeline.get(step)    # collect(): rollout + rewards + shaping + DAPO, drawn
                                       #   from policy version step - k (k = 0: on-policy)
      batch    = assemble(rollouts, objective, ...)          # advantages + a typed TrainBatch
      state, m = update(state, batch, ref, keys.update(step))  # μ = 1 fused or μ > 1 scan
      hooks(step, m)                                         # log / eval / checkpoint / SIGTERM

The stages live in `rljax.loop`; this module only builds them from the config and runs
them. `rollout.placement = disaggregated` puts the sampler on its own devices
(`rljax.loop.placement`) and, with `rollout.max_staleness = k`, draws batch t + k there while
batch t trains (`rljax.loop.pipeline`); `rollout.lag = k` is the same schedule on one mesh,
run in turn. `Trainer(cfg, workdir).run()` resumes from the newest checkpoint in `workdir`;
SIGTERM (TPU preemption) saves at the end of the current step and exits cleanly.
"""
from __future__ import annotations

import dataclasses
import json
import os
import time
import warnings

import jax
import jax.numpy as jnp
import ml_collections as mlc
import numpy as np
from flax import nnx

from rljax import distributed as dist
from rljax import packing, paths
from rljax import sharding as shd
from rljax.config_check import sampler_config, validate_config
from rljax.loop import (CollapseGuard, Collector, Evaluator, Keys, Preemption, PromptEncoder,
                        RunCheckpoints, SkipGuard, TrainingAborted, assemble, build_data,
                        build_model, build_step_parts, check_inputs, collect, layout_of,
                        needs_ref_params, print_baseline, rollout_metrics,
                        token_weight_heatmap, update_metrics)
from rljax.loop import pipeline as pipe
from rljax.loop.batch import permute_rows
from rljax.loop.metrics import minibatch_token_metrics, pack_metrics
from rljax.loop.placement import describe, make_placement, sampler_model, to_sampler
from rljax.metrics_log import CompileClock, MetricsWriter
from rljax.rollout import SamplerSync
from rljax.train_step import init_state
from rljax.update import jit_update, minibatch_order
from rljax.workdir import check_compatible, check_workdir, finished_metrics, latest_saved_step

__all__ = ["Trainer", "TrainingAborted"]


class Trainer:
  def __init__(self, cfg: mlc.ConfigDict, workdir: str, devices=None):
    """`devices`: the devices the run may use (default: all of every process)."""
    self.cfg, self.workdir = cfg, os.fspath(workdir)
    devices = list(jax.devices() if devices is None else devices)
    for w in validate_config(cfg, len(devices)):
      warnings.warn(w)
    paths.check_writable(self.workdir)
    check_workdir(self.workdir)  # a directory (or none yet) this process can write in
    check_compatible(cfg, self.workdir)  # before anything in the workdir is overwritten
    self._finished = finished_metrics(self.workdir, cfg.train.steps,
                                      latest_saved_step(self.workdir))
    if self._finished is not None:  # a finished run: nothing to build, its results are kept
      return
    self.place = make_placement(cfg, devices)
    self.mesh = self.place.trainer_mesh
    dist.check_batch(cfg.data.batch_size, self.mesh)  # before anything compiles
    check_inputs(cfg)  # model, tokenizer, data files and reward: before anything is written
    if self.place.disaggregated:
      dist.check_batch(cfg.data.batch_size, self.place.sampler_mesh)
      print(f"placement: {describe(self.place)}", flush=True)
    if dist.is_writer():  # one writer; the others meet it at the barrier below
      paths.write_text(os.path.join(self.workdir, "config.json"),
                       cfg.to_json_best_effort(indent=2))
    self.model = m = build_model(cfg, self.mesh)
    self.data = build_data(cfg, self.workdir)
    self.objective, self.optimizer, self.step_cfg = build_step_parts(cfg, m.cfg.vocab_size)
    self.state = shd.init_sharded(  # optimizer moments sharded like their params
        lambda p: init_state(p, self.optimizer, self.objective), m.trainable(), self.mesh)
    if m.lora is not None:  # the frozen base: the step reads it, and it is the reference
      self.ref_params = m.params
    else:
      self.ref_params = (jax.tree.map(jnp.copy, m.params) if needs_ref_params(self.step_cfg)
                         else None)
    self.sampler_base = None  # LoRA, disaggregated: the base on the sampler's devices
    self.per_criterion = self.step_cfg.replay and self.step_cfg.replay_mode == "per_criterion"
    from rljax.data import criteria_ids
    from rljax.rewards.from_config import build_reward
    self.criterion_ids = tuple(criteria_ids())
    reward_fn = build_reward(cfg.reward)
    encoder = PromptEncoder(m.tokenizer, cfg.data, m.pad_id, self.per_criterion,
                            self.criterion_ids)
    collector = lambda mesh: Collector(
        mesh=mesh, encoder=encoder, tokenizer=m.tokenizer, source=self.data.source,
        decode=self.data.decode, reward_fn=reward_fn,
        sampler_cfg=sampler_config(cfg, stop_ids=(m.tokenizer.eos_token_id,), pad_id=m.pad_id),
        num_threads=cfg.reward.num_threads, overlong_cache=cfg.objective.overlong_cache)
    self.collector = collector(self.place.sampler_mesh)
    self.sync = SamplerSync(cfg.rollout.copy, every=cfg.rollout.sync_every)
    r = cfg.rollout
    self.pipeline = pipe.RolloutPipeline(
        self._draw, self._sampler_for,
        lag=r.max_staleness if self.place.disaggregated else r.lag,
        # XLA:CPU hangs when two programs with cross-process collectives run at once (gloo),
        # so several processes run the two stages in turn, each on its own devices
        overlap=self.place.disaggregated and jax.process_count() == 1)
    self.keys = Keys(cfg.seed)
    wandb = None
    if cfg.log.wandb.enabled and dist.is_writer():
      from rljax.tracking import WandbLogger
      wandb = WandbLogger(self.workdir, cfg.log.wandb, cfg.to_dict())
    self.log = MetricsWriter(self.workdir, tensorboard=cfg.log.tensorboard,
                             total_steps=cfg.train.steps, active=dist.is_writer(), wandb=wandb)
    self.evaluate = Evaluator(collector(self.mesh), self.data.eval_examples, reward_fn, self.log,
                              cfg.eval.num_samples, cfg.eval.sampled)
    self.ckpt = RunCheckpoints(self.workdir, cfg.checkpoint, cfg.seed, self.data.batches,
                               self.sync)
    self.skips = SkipGuard(cfg.train.max_consecutive_skips)
    self.collapse = CollapseGuard(cfg.train.max_collapsed_steps)
    self._updates: dict = {}  # one jitted update per batch layout (prompt buckets)

  # ------------------------------------------------------------------------- stages
  def _sampler_for(self, step: int):
    """(sampler, its policy version) to launch rollouts with at `step`: synced from the
    trainer per `rollout.sync_every`, moved to the sampler's devices when disaggregated."""
    m = self.model
    src = None
    if self.sync.due(step) and m.lora is not None and self.place.disaggregated:
      # only the adapters travel; the base moved once, and they merge on the sampler's devices
      if self.sampler_base is None:
        self.sampler_base = to_sampler(m.params, self.place)
      src = nnx.merge(m.sampler_graphdef, m.policy_params(
          to_sampler(self.state.params, self.place), self.sampler_base))
    elif self.sync.due(step):
      src = sampler_model(m.sampler_graphdef, m.policy_params(self.state.params), self.place)
    # merged LoRA weights are new arrays: the sampler holds them without another copy
    return (self.sync.params(step, src, private=self.place.disaggregated or m.lora is not None),
            self.sync.last_sync_step)

  def _draw(self, batch: int, sampler):
    """Rollout batch number `batch`: `sampler` on the next prompts, rewards, shaping and DAPO
    dynamic sampling, with that batch's keys."""
    o = self.cfg.objective
    draw = lambda key: self.collector.rollout(
        sampler, np.asarray(next(self.data.batches)["prompts"]), key)
    return collect(draw, self.keys.rollout(batch), group_size=self.objective.group_size,
                   dynamic_sampling=o.dynamic_sampling, max_resample=o.max_resample,
                   resample_key=lambda attempt: self.keys.resample(batch, attempt))

  def collect(self, step: int):
    """The rollout batch of `step` drawn now from the current params (the pipeline's
    `_draw` without the schedule)."""
    return self._draw(step, self._sampler_for(step)[0])

  def assemble(self, roll):
    batch = assemble(roll, self.objective, replay=self.step_cfg.replay,
                     per_criterion=self.per_criterion, head=bool(self.step_cfg.head_k))
    if self.cfg.train.pack and not self._presorted:  # packed forwards (rljax.packing)
      batch = self._plan(batch)
    return batch

  @property
  def _presorted(self) -> bool:
    """Packing or token-balanced mini-batches at μ > 1 with one epoch: the update gets the
    batch in its mini-batch order, drawn on the host, so that each plan packs a whole
    mini-batch (`update`)."""
    t = self.cfg.train
    return bool(t.pack or t.balance_tokens) and not self.step_cfg.fused_scoring \
        and t.inner_epochs == 1 and t.num_minibatches > 1

  def _plan(self, batch):
    arrays = batch.arrays()
    t, plans = packing.planned(arrays, self._pack_unit(batch), self.cfg.train.tokens_per_row)
    return batch._replace(packed=plans, pack_tokens_per_row=t)

  def _pack_unit(self, batch) -> int:
    t = self.cfg.train
    return packing.unit_rows(batch.mask_BxN.shape[0], self.objective.group_size,
                             self.step_cfg.fused_scoring, t.grad_accum, t.num_minibatches,
                             self._presorted)

  def update(self, step: int, batch):
    """The optimizer update(s) of one batch (`rljax.update.jit_update`); host metrics. With
    packing (or `train.balance_tokens`) at μ > 1 and one epoch the rows go to the device in
    the mini-batch order of `keys.update(step)` (the same mini-batches as the device-side
    draw; with balance_tokens, groups dealt into mini-batches and micro-batches of about the
    same tokens), planned per mini-batch; `batch` itself keeps the rollout's order."""
    pack = {}
    t = self.cfg.train
    if self._presorted:
      tokens = packing.row_tokens(batch.arrays())
      units = t.num_minibatches * t.grad_accum
      order = minibatch_order(self.keys.update(step), batch.mask_BxN.shape[0],
                              self.objective.group_size, t.num_minibatches,
                              row_tokens=tokens if t.balance_tokens else None, units=units)
      batch = permute_rows(batch, order)
      if t.pack:
        batch = self._plan(batch)
      pack = {**pack_metrics(batch), **minibatch_token_metrics(tokens[order], units)}
    layout = layout_of(batch)
    sh = layout.shardings(self.mesh)
    if layout not in self._updates:
      state_sh = jax.tree.map(lambda x: x.sharding, self.state)
      ref_sh = (None if self.ref_params is None
                else jax.tree.map(lambda x: x.sharding, self.ref_params))
      sc = dataclasses.replace(self.step_cfg, tokens_per_row=layout.pack_tokens_per_row,
                               pack_group=self._pack_unit(batch))
      self._updates[layout] = jit_update(
          self.model.graphdef, self.optimizer, sc, epochs=t.inner_epochs,
          num_minibatches=t.num_minibatches, grad_accum=t.grad_accum, state_shardings=state_sh,
          batch_shardings=sh, ref_shardings=ref_sh, replicated=shd.replicated(self.mesh),
          presorted=self._presorted)
    self.state, metrics = self._updates[layout](
        self.state, dist.put_global(batch.arrays(), sh), self.ref_params, self.keys.update(step))
    return {**update_metrics(jax.device_get(metrics), self.criterion_ids), **pack}

  def check_skips(self, done: int, metrics: dict) -> None:
    """Aborts, after saving the last good state, once `train.max_consecutive_skips` updates
    in a row were skipped for a non-finite loss or gradient."""
    if self.skips.check(metrics):
      self.ckpt.save(done, self.state, metrics, inflight=self.pipeline.drain())
      raise TrainingAborted(self.skips.message(done, self.cfg.optim.lr, self.workdir))

  def _stage_metrics(self, drawn, t0: float, t1: float, t2: float) -> dict:
    """Staleness, waits, the sampler / learner overlap and the timeline of one step (t0:
    the step's start, t1: its batch in hand, t2: its update done)."""
    hist = self.pipeline.history
    prev = hist[-2] if len(hist) > 1 else None
    busy = [d for d in [drawn] + self.pipeline.in_flight() if d.start is not None]
    clock = self.pipeline.clock0
    out = {"rollout/staleness": float(drawn.batch - drawn.version),
           "time/rollout_and_reward": (drawn.end or t1) - (drawn.start or t0),
           "time/train": t2 - t1,
           "time/learner_wait": t1 - t0,  # the learner not training: waiting for batch t
           "time/sampler_wait": pipe.sampler_idle(prev, drawn),
           "rollout/overlap": pipe.overlap((t1, t2), busy, time.time()) / max(t2 - t1, 1e-9)}
    if drawn.start is not None:
      out.update({"timeline/collect_start": drawn.start - clock,
                  "timeline/collect_end": drawn.end - clock})
    out.update({"timeline/update_start": t1 - clock, "timeline/update_end": t2 - clock})
    return out

  def _eval(self, step: int) -> dict:
    t0 = time.time()
    ev = self.evaluate(self.policy(), step=step)
    return dict(ev, **{"time/eval": time.time() - t0}) if ev else {}

  def policy(self, state=None):
    """The current policy as a plain Decoder (LoRA: the merged weights)."""
    m = self.model
    return nnx.merge(m.sampler_graphdef, m.policy_params((state or self.state).params))

  # ------------------------------------------------------------------------- loop
  def run(self) -> dict:
    cfg = self.cfg
    if self._finished is not None:  # a rerun of a finished run is a no-op
      print(f"{self.workdir}: already finished (train.steps={cfg.train.steps}); results kept. "
            "Raise --config.train.steps to continue, or use a new --workdir.", flush=True)
      return self._finished
    place = (lambda pure: to_sampler(pure, self.place)) if self.place.disaggregated else None
    self.state, start, inflight = self.ckpt.restore(self.state, self.policy, place)
    self.pipeline.start(start, inflight)
    self.log.truncate_after(start if start else -1)  # steps after the checkpoint: rewritten
    if start == 0 and cfg.eval.at_start:
      ev = self._eval(0)  # the initial policy: the curve's baseline
      if ev:
        self.log.write(0, ev)
        print_baseline(ev)
    metrics, last, compiles = {}, None, CompileClock()
    try:
      with Preemption() as preempt:
        for step in range(start, cfg.train.steps):
          t0 = time.time()
          drawn, _ = self.pipeline.get(step)
          roll = drawn.roll
          t1 = time.time()
          batch = self.assemble(roll)
          metrics = self.update(step, batch)
          t2 = time.time()
          metrics.update(rollout_metrics(roll, batch), **self._stage_metrics(drawn, t0, t1, t2))
          last, done = (batch, roll), step + 1
          preempt.requested = dist.any_process(preempt.requested)  # all stop at one step
          self.check_skips(done, metrics)
          if self.collapse.check(done, metrics, batch):  # nothing saved: the state is dead
            raise TrainingAborted(self.collapse.message(
                done, metrics, cfg.optim.lr, self.model.cfg.vocab_size, self.workdir))
          ev = None
          if (cfg.eval.every and done % cfg.eval.every == 0) or done == cfg.train.steps:
            self.pipeline.drain()  # the reward functions and devices to the eval alone
            ev = self._eval(done)
            metrics.update(ev)
          if preempt.requested or done == cfg.train.steps or (
              cfg.checkpoint.every and done % cfg.checkpoint.every == 0):
            self.ckpt.save(done, self.state, metrics, ev, inflight=self.pipeline.drain())
          metrics["time/step"] = time.time() - t0
          metrics["time/compile"] = compiles.lap()  # included in time/step
          metrics["throughput/tokens_per_s"] = float(batch.attn_mask_BxL.sum()) / max(
              metrics["time/step"], 1e-9)
          self.log.write(done, metrics)
          self.log.console(done, metrics)
          if preempt.requested:
            print(f"SIGTERM: saved step {done} to {self.workdir}; exiting", flush=True)
            break
    finally:
      self.pipeline.close()
      self.log.close()
      self.ckpt.close()
    self._finish(metrics, last, stopped=preempt.requested)
    return metrics

  def _finish(self, metrics: dict, last, stopped: bool) -> None:
    """The CoRT heat-map, the plots and `final_metrics.json` of a run that ended."""
    cfg = self.cfg
    if cfg.log.plot and not stopped and self.step_cfg.replay and last is not None:
      sh = layout_of(last[0]).shardings(self.mesh)
      token_weight_heatmap(self.workdir, self.model.graphdef, self.state, *last, self.step_cfg,
                           self.ref_params, sh, self.model.tokenizer, cfg.train.steps)
    if dist.is_writer():
      if cfg.log.plot and not stopped:
        from rljax.plot import plot_runs
        plot_runs([self.workdir], os.path.join(self.workdir, "plots"))
      paths.write_text(os.path.join(self.workdir, "final_metrics.json"),
                       json.dumps(metrics, indent=2))
    dist.barrier("run_end")
