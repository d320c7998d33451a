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
  """A run's model. Full fine-tuning trains `params`. With LoRA (`lora` set) `params` is the
  frozen base (integers for QLoRA), `adapters` the trained part, and the sampler, the eval
  and the export read the merged weights (`policy_params`) through `sampler_graphdef`."""
  tokenizer: object
  graphdef: object
  params: dict                  # pure dict
  cfg: object                   # rljax.models.ModelConfig
  pad_id: int
  lora: object = None           # rljax.models.lora.LoraConfig
  adapters: dict | None = None  # pure dict (LoRA)
  sampler_graphdef: object = None  # the plain decoder (merged weights); graphdef without LoRA

  def __post_init__(self):
    if self.sampler_graphdef is None:
      self.sampler_graphdef = self.graphdef
    self._merges: dict = {}  # mesh -> jitted merge

  def trainable(self) -> dict:
    """What the optimizer updates: the adapters with LoRA, else every parameter."""
    return self.params if self.lora is None else self.adapters

  def policy_params(self, trained: dict, base: dict | None = None) -> dict:
    """The plain decoder's params (for `sampler_graphdef`) of the policy whose trained part is
    `trained`: with LoRA, W + (α / r) · A B merged on device over `base` (default: the
    frozen base), in the rule shardings of the mesh `base` lies on."""
    if self.lora is None:
      return trained
    base = self.params if base is None else base
    sharding = jax.tree.leaves(base)[0].sharding
    mesh = getattr(sharding, "mesh", None)
    if mesh not in self._merges:
      from rljax import sharding as shd
      from rljax.models.lora import merge
      fn = lambda b, a: merge(b, a, self.lora)
      out_sh = (None if mesh is None
                else shd.param_shardings(jax.eval_shape(fn, base, trained), mesh))
      self._merges[mesh] = jax.jit(fn, out_shardings=out_sh)
    return self._merges[mesh](base, trained)


def lora_config(cfg: mlc.ConfigDict):
  """`config.model.lora` as a LoraConfig, or None (rank 0: full fine-tuning)."""
  from rljax.models.lora import LoraConfig
  lo = cfg.model.get("lora")
  if lo is None or not lo.rank:
    return None
  return LoraConfig(rank=int(lo.rank), alpha=float(lo.alpha), targets=str(lo.targets),
                    base_bits=int(lo.base_bits))


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def check_inputs(cfg: mlc.ConfigDict) -> None:
  """The run's input files, read and checked before anything is written to its workdir:
  the model (config.json and every safetensors header, or the GGUF), the tokenizer's files,
  the JSONL prompt / eval files (every record), and the reward (imported and bound). Each
  error names the config key and the file (and line)."""
  from rljax.data.prompts import read_prompts
  from rljax.models.bundled import resolve
  from rljax.models.checkpoint import open_checkpoint
  from rljax.rewards.from_config import build_reward
  from rljax.rewards.jsonl import read_ifeval_jsonl
  c = cfg.model
  if not c.tiny:
    path = resolve(c.path)
    _check_model_path(path, "model.path", tokenizer=False)
    open_checkpoint(path)  # config.json and the safetensors headers against the file sizes
  key = "model.tokenizer" if c.tokenizer else "model.path"
  _check_model_path(resolve(c.tokenizer or c.path), key, tokenizer=True)
  d = cfg.data
  if d.dataset == "jsonl":
    for k in ("path", "heldout_path"):
      if d.get(k, ""):
        _check_file(d[k], f"data.{k}")
        read_prompts(d[k])  # every record: malformed JSON / missing fields name file:line
  if cfg.eval.path:
    _check_file(cfg.eval.path, "eval.path")
    read_ifeval_jsonl(cfg.eval.path)
  build_reward(cfg.reward)  # imports a "module:fn" reward and binds its options


def _check_file(path: str, key: str) -> None:
  if not os.path.isfile(path):
    what = "is a directory" if os.path.isdir(path) else "no such file"
    raise FileNotFoundError(f"config.{key}={path}: {what}")


def _check_model_path(path: str, key: str, *, tokenizer: bool) -> None:
  """A Hugging Face directory (config.json, tokenizer files) or a .gguf file."""
  want = ("a Hugging Face directory (config.json, *.safetensors, tokenizer files) or a .gguf "
          "file; 'smollm2' names the bundled model")
  if not os.path.exists(path):
    raise FileNotFoundError(f"config.{key}={path}: no such file or directory; expected {want}")
  if os.path.isdir(path):
    if not tokenizer and not os.path.exists(os.path.join(path, "config.json")):
      raise FileNotFoundError(f"config.{key}={path}: no config.json in the directory; "
                              f"expected {want}")
    if tokenizer and not any(os.path.exists(os.path.join(path, f)) for f in TOKENIZER_FILES):
      raise FileNotFoundError(f"config.{key}={path}: no tokenizer files in the directory (one "
                              f"of {', '.join(TOKENIZER_FILES)}); expected {want}")
  elif not path.endswith(".gguf"):
    raise FileNotFoundError(f"config.{key}={path}: not a directory or a .gguf file; "
                            f"expected {want}")


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
                       causal_block=c.get("causal_block", 64), **c.tiny_config.to_dict())
    model = create_model(mcfg, mesh=mesh, seed=cfg.seed, remat=c.remat)
  else:
    model = load_model(resolve(c.path), mesh=mesh, remat=c.remat, param_dtype=c.param_dtype,
                       dtype=c.dtype, attention=c.attention,
                       causal_block=c.get("causal_block", 64))
  if jax.default_backend() == "cpu":  # unrolled layers: a faster step, a longer compile
    model.scan_unroll = model.cfg.num_layers
  k = cfg.rollout.record_topk
  if k > model.cfg.vocab_size:
    raise ValueError(f"config.rollout.record_topk={k} exceeds the vocabulary "
                     f"({model.cfg.vocab_size})")
  graphdef, params = nnx.split(model)
  pad_id = tokenizer.pad_token_id or 0
  lora = lora_config(cfg)
  if lora is None:
    return Model(tokenizer=tokenizer, graphdef=graphdef, params=nnx.to_pure_dict(params),
                 cfg=model.cfg, pad_id=pad_id)
  base, lora_graphdef = lora_base(model, nnx.to_pure_dict(params), lora, mesh)
  from rljax.models.lora import init_adapters
  adapters = init_adapters(model.cfg, lora, seed=cfg.seed, mesh=mesh)
  return Model(tokenizer=tokenizer, graphdef=lora_graphdef, params=base, cfg=model.cfg,
               pad_id=pad_id, lora=lora, adapters=adapters, sampler_graphdef=graphdef)


def lora_base(model, pure: dict, lora, mesh) -> tuple[dict, object]:
  """(the frozen base, the LoRA decoder's graphdef) from a loaded float model: QLoRA
  quantizes the projections, embedding and LM head on device, in their shardings."""
  from rljax import sharding as shd
  from rljax.models.decoder import Decoder
  from rljax.models.lora import quantize_base
  abstract = nnx.eval_shape(lambda: Decoder(model.cfg, nnx.Rngs(0), remat=model.remat,
                                            lora=lora))
  abstract.scan_unroll = model.scan_unroll
  graphdef, abs_state = nnx.split(abstract)
  if not lora.base_bits:
    return pure, graphdef
  shapes = nnx.to_pure_dict(abs_state)
  out_sh = None if mesh is None else shd.param_shardings(shapes, mesh)
  base = jax.jit(lambda p: quantize_base(p, lora.base_bits), out_shardings=out_sh)(pure)
  return base, graphdef


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
      fused_scoring=fused_scoring(cfg, objective),
      old_policy=t.old_policy,
      # record_topk -1 ('full'): the whole distribution, scored at every vocabulary id
      head_k=vocab_size if r.record_topk == -1 else r.record_topk, use_ref=bool(t.ref_model),
      replay_policy=o.replay_policy, replay_mode=o.replay_mode,
      num_criteria_ids=len(criteria_ids()), lora=lora_config(cfg) is not None)
  return objective, optimizer, step_cfg


def fused_scoring(cfg: mlc.ConfigDict, objective) -> bool:
  """μ = 1 updates in the fused step (π_old = sg(π_θ), no scoring forward) unless grad_accum
  splits the batch while the tokens in the loss are known only after the forward (truncated
  scoring or rejection): then π_old is scored first, so the normalizer counts them exactly."""
  t, r = cfg.train, cfg.rollout
  if t.inner_epochs * t.num_minibatches != 1:
    return False
  truncating = t.truncate_logprobs and (r.top_k > 0 or float(r.top_p) < 1.0)
  return not (t.grad_accum > 1 and (truncating or objective.rejects))


def needs_ref_params(step_cfg: StepConfig) -> bool:
  """A frozen copy of the initial params: the KL reference, or the CoRT replay scored by it.
  (A LoRA run needs none: its frozen base, which the step always reads, is the reference.)"""
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
