"""What a run is built from its config: the model (and tokenizer), the data, the objective,
optimizer and step settings. The trainer, `rljax.aot` and the benches build them here."""
from __future__ import annotations

import dataclasses
import os

import jax
import ml_collections as mlc
from flax import nnx

from rljax import distributed as dist
from rljax import paths
from rljax.config_check import objective_kwargs
from rljax.objectives import build_objective, needs_replay
from rljax.train_step import StepConfig, make_optimizer


@dataclasses.dataclass
class Model:
  tokenizer: object
  graphdef: object
  params: dict                  # pure dict
  cfg: object                   # rljax.models.ModelConfig
  pad_id: int


def build_model(cfg: mlc.ConfigDict, mesh) -> Model:
  """The decoder of `config.model` (a tiny random one, or HF safetensors / GGUF loaded into
  `mesh`'s shardings) and its tokenizer."""
  from rljax.models import create_model, load_model
  from rljax.models.bundled import resolve
  from rljax.models.config import ModelConfig
  from rljax.models.tokenizer import load_tokenizer
  c = cfg.model
  tokenizer = load_tokenizer(resolve(c.tokenizer or c.path))
  if c.tiny:
    mcfg = ModelConfig(vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id,
                       param_dtype=c.param_dtype, dtype=c.dtype, attention=c.attention,
                       **c.tiny_config.to_dict())
    model = create_model(mcfg, mesh=mesh, seed=cfg.seed, remat=c.remat)
  else:
    model = load_model(resolve(c.path), mesh=mesh, remat=c.remat, param_dtype=c.param_dtype,
                       dtype=c.dtype, attention=c.attention)
  if jax.default_backend() == "cpu":  # unrolled layers: a faster step, a longer compile
    model.scan_unroll = model.cfg.num_layers
  k = cfg.rollout.record_topk
  if k > model.cfg.vocab_size:
    raise ValueError(f"config.rollout.record_topk={k} exceeds the vocabulary "
                     f"({model.cfg.vocab_size})")
  graphdef, params = nnx.split(model)
  return Model(tokenizer=tokenizer, graphdef=graphdef, params=nnx.to_pure_dict(params),
               cfg=model.cfg, pad_id=tokenizer.pad_token_id or 0)


@dataclasses.dataclass
class RunData:
  source: object               # the training records (indexable)
  decode: object               # record -> example dict
  batches: object              # GroupBatcher over the global stream of record indices
  eval_examples: list


def build_data(cfg: mlc.ConfigDict, workdir: str) -> RunData:
  """The training source and batcher, and the held-out examples. Process 0 builds the
  dataset; the others wait for it. Every process iterates the same global stream of record
  indices (the same as on one process) and decodes only the prompts its devices hold."""
  from rljax.data import GroupBatcher, ShardedIterator
  from rljax.data.run_data import eval_file_examples, sources
  d = cfg.data
  # array_record data needs a local disk: a bucket workdir keeps it in a local cache
  data_dir = d.data_dir or (paths.local_cache_dir("tfds") if paths.is_remote(workdir)
                            else os.path.join(workdir, "tfds"))
  train, held, decode = dist.writer_first("data", lambda: sources(d, cfg.seed, data_dir))
  batches = GroupBatcher(ShardedIterator(range(len(train)), seed=cfg.seed), d.batch_size,
                         cfg.rollout.num_generations)
  if cfg.eval.path:
    examples = eval_file_examples(cfg.eval.path, cfg.eval.num_prompts)
  else:
    n = 0 if held is None else min(cfg.eval.num_prompts, len(held))
    examples = [decode(held[i]) for i in range(n)]
  return RunData(source=train, decode=decode, batches=batches, eval_examples=examples)


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
      replay=needs_replay(o.transforms),
      fused_scoring=t.inner_epochs == 1 and t.num_minibatches == 1,
      # record_topk -1 ('full'): the whole distribution, scored at every vocabulary id
      head_k=vocab_size if r.record_topk == -1 else r.record_topk, use_ref=bool(t.ref_model),
      replay_policy=o.replay_policy, replay_mode=o.replay_mode,
      num_criteria_ids=len(criteria_ids()))
  return objective, optimizer, step_cfg


def needs_ref_params(step_cfg: StepConfig) -> bool:
  """A frozen copy of the initial params: the KL reference, or the CoRT replay scored by it."""
  return step_cfg.use_ref or (step_cfg.replay and step_cfg.replay_policy == "ref")


def batch_layout(cfg: mlc.ConfigDict, step_cfg: StepConfig):
  """The train batch's layout at the config's maximal prompt lengths (what AOT compiles)."""
  from rljax.loop.batch import BatchLayout
  d = cfg.data
  return BatchLayout(rows=d.batch_size, prompt_len=d.max_prompt_len,
                     response_len=step_cfg.response_len,
                     replay_prompt_len=d.max_replay_prompt_len if step_cfg.replay else 0,
                     num_criteria=d.max_criteria if step_cfg.replay_mode == "per_criterion"
                     and step_cfg.replay else 0, head_k=step_cfg.head_k)
