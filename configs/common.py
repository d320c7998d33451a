"""The base every config shares, and the `:arg` parser (big_vision style).

`get_config("tiny")`, `get_config("model=smollm2,steps=5")`: the string after
the ':' on the command line is a comma-separated list of `key=value` or bare
flags (`tiny` means `tiny=True`).
"""
from __future__ import annotations

import ast

import ml_collections as mlc


def parse_arg(arg: str | None, **defaults) -> mlc.ConfigDict:
  """'tiny,steps=5' -> ConfigDict(tiny=True, steps=5), over `defaults` (typed by them)."""
  out = dict(defaults)
  for part in filter(None, (arg or "").split(",")):
    key, _, value = part.partition("=")
    key = key.strip()
    if key not in out:
      raise ValueError(f"unknown config arg {key!r}; valid: {', '.join(sorted(out))}")
    if not value:
      out[key] = True
      continue
    try:
      parsed = ast.literal_eval(value)
    except (ValueError, SyntaxError):
      parsed = value
    out[key] = type(out[key])(parsed) if out[key] is not None and not isinstance(
        out[key], bool) else parsed
  return mlc.ConfigDict(out)


def base_config(arg: str | None = None) -> mlc.ConfigDict:
  """The shared base: CoRT-GRPO on SmolLM2 with the bundled rubric prompts.

  The default is the CoRT paper's setting (64 prompts × 8 samples, lr 1e-6, clip
  0.2 / 0.27, 4 mini-batches of whole groups = 4 PPO updates per rollout batch); `:cpu`
  is the README's minutes-long main job on 2 CPU cores; `:tiny` a seconds-long random model;
  `:gpu` bfloat16 compute with cuDNN attention on an NVIDIA GPU (combine: `:cpu,gpu`);
  `:pack` packed training rows (train.pack).
  """
  a = parse_arg(arg, tiny=False, cpu=False, gpu=False, model="smollm2", steps=0, lora=0,
                qlora=0, pack=False)
  c = mlc.ConfigDict()
  c.seed = 0
  c.workdir = ""  # --workdir; default runs/<config name>
  c.model = mlc.ConfigDict(dict(path=a.model, tiny=a.tiny, param_dtype="float32",
                                dtype="float32", remat="none", attention="dense", causal_block=64,
                                tokenizer=""))
  # remat: "none" | "dots" (keep the projections' outputs, recompute the rest: on CPU the
  # SmolLM2 step at 0.49x today's peak memory and no slower) | "full" (keep layer inputs);
  # attention: "dense" | "blockwise" | "splash" (Pallas TPU kernels) | "cudnn"
  # (jax.nn.dot_product_attention: cuDNN on GPU) | "auto" (splash on TPU, cudnn on a GPU)
  # (flash-style, no [B,H,T,T] scores kept) — see bench/README.md for memory and time;
  # causal_block: dense attention's queries in blocks of this many against the keys up to the
  # block's end, the blocks above the diagonal skipped (0: one [T, T] block)
  # lora: train rank-`rank` adapters on the projections whose names fully match `targets`
  # (wq wk wv wo w_gate w_up w_down), scaled by alpha / rank, over a frozen base (rank 0:
  # train every weight); base_bits 8 / 4 stores the frozen base as integers (QLoRA).
  # rljax/models/lora.py; `:lora=R` (and `qlora=8|4`) sets them with a 10x learning rate.
  c.model.lora = mlc.ConfigDict(dict(rank=0, alpha=32.0, base_bits=0,
                                     targets="wq|wk|wv|wo|w_gate|w_up|w_down"))
  # a random tiny decoder (used when model.tiny); the tokenizer is still the model path's
  c.model.tiny_config = mlc.ConfigDict(dict(
      model_type="qwen3", hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
      num_kv_heads=2, head_dim=16, qk_norm=True, tie_embeddings=True))
  c.mesh = mlc.ConfigDict(dict(shape=(1, -1, 1)))
  c.data = mlc.ConfigDict(dict(
      dataset="rubric", data_dir="", num_train=512, num_heldout=64, min_criteria=1,
      max_criteria=3, batch_size=512, max_prompt_len=160, max_replay_prompt_len=64, system="",
      instruction_ids=(),  # () = every registered IFEval criterion
      # prompts are padded to the batch's longest, rounded up to a multiple of
      # prompt_bucket (at most max_prompt_len / max_replay_prompt_len); 0 = always the max
      prompt_bucket=32,
      path="", heldout_path=""))  # dataset "jsonl": your prompts files (rljax/data/prompts.py)
  # placement: colocated (sampler and trainer on mesh.shape) | disaggregated (the sampler on
  # num_devices devices of its own, as mesh_shape (default: (processes, -1, 1)); the trainer
  # on the rest, as mesh.shape). Batch t is drawn from policy version t - k: max_staleness = k
  # draws it on the sampler's devices while batch t - k trains (disaggregated); lag = k is
  # the same schedule run in turn on one mesh (colocated: the synchronous reference).
  # compact_every: 0 off; k: every k decode steps, the rows still running move into the
  # smallest decode batch of a ladder (four sizes per doubling) that holds them (finished rows
  # stop costing; same samples; rljax/rollout/sampler.py compact_size).
  # decode_kernel: auto (CPU, one device, float32: decode attention in a compiled kernel that
  # reads the KV cache in place, rljax/models/cpu_attention.py) | xla.
  c.rollout = mlc.ConfigDict(dict(
      num_generations=8, max_new_tokens=48, temperature=1.0, top_k=0, top_p=1.0,
      record_topk=0, copy="none", sync_every=1, placement="colocated", num_devices=0,
      mesh_shape=(), max_staleness=0, lag=0, compact_every=0, decode_kernel="auto"))
  # reward: a registered name or "module:fn", its options, or weighted terms
  # ({"name": ..., "weight": ..., **options}, ...) - see rljax/rewards/from_config.py
  # guard: csr / aon give 0 to degenerate answers the checkers accept (a repeated template,
  # the same phrase over and over, glued subword noise; rljax/rewards/hygiene.py)
  c.reward = mlc.ConfigDict(dict(name="csr", mode="strict", guard=True, num_threads=0,
                                 options={}, terms=()))
  # CoRT ramp_steps: an int K, or a float f in (0, 1] = K = round(f · train.steps). λ reaches
  # 1 at update K (+ warmup_steps): the last of S steps is update S − 1, so f = 1.0 ends at
  # λ = SmoothStep((S − 1)/S) < 1 and f ≤ (S − 1)/S reaches 1 within the run. replay_policy: old (π_old) | ref (frozen initial
  # params); replay_mode: all (x⁻ = no criteria) | per_criterion (x⁺ minus criterion j).
  c.objective = mlc.ConfigDict(dict(
      advantage="grpo", transforms=("cort",), loss="grpo", advantage_kwargs={},
      transform_kwargs={"cort": {"ramp_steps": 0.5, "warmup_steps": 0}},
      loss_kwargs={"eps_low": 0.2, "eps_high": 0.27}, dynamic_sampling=False,
      max_resample=3, overlong_cache=0, replay_policy="old",
      replay_mode="all"))  # overlong_cache: DAPO L_cache
  c.optim = mlc.ConfigDict(dict(lr=1e-6, weight_decay=0.0, b1=0.9, b2=0.999, eps=1e-8,
                                grad_clip=1.0, warmup_steps=0, schedule="constant"))
  # truncate_logprobs: score π_θ under the sampler's top-k / top-p truncation too (p = q
  # exactly without mismatch, but log p = -inf where the supports differ); default: the full
  # distribution at the sampler's temperature, so the truncation is part of the mismatch.
  # inner_epochs × num_minibatches PPO updates per rollout batch (mini-batches of whole
  # groups); max_collapsed_steps: abort when that many steps in a row had a gradient of exactly
  # 0 although their advantages were not (a collapsed policy; 0 = never);
  # max_consecutive_skips: abort (after saving) when that many updates in a row were
  # skipped for a non-finite loss / gradient (0 = never).
  # old_policy: decoupled (π_old re-scored by the trainer; the IS weight of tis / mis / bpo is
  # π_old / q) | bypass (π_old := the sampler's recorded log q: the PPO ratio π_θ / q is the
  # correction, and at μ > 1 the π_old forward is skipped).
  # pack: the update's forwards run on packed rows of tokens_per_row tokens (rljax/packing.py:
  # sequences first-fit into rows, attention within a sequence; the losses and metrics are
  # the padded batch's); tokens_per_row 0 = the batch's padded row length L, or L rounded up
  # to 128 where that packs into fewer slots (packing.row_length).
  # balance_tokens: at one epoch of num_minibatches > 1, groups are dealt into mini-batches
  # (and grad_accum micro-batches) of about the same real tokens, not at random
  # (rljax.update.balanced_groups); with pack, the fullest mini-batch sets the packed rows.
  c.train = mlc.ConfigDict(dict(steps=8, inner_epochs=1, num_minibatches=4, grad_accum=1,
                                logprob_chunk=256, ref_model=False, truncate_logprobs=False,
                                max_consecutive_skips=3, max_collapsed_steps=3,
                                old_policy="decoupled", pack=False, tokens_per_row=0,
                                balance_tokens=False))
  # async_save: orbax writes in the background; the next save and the exit wait for it
  c.checkpoint = mlc.ConfigDict(dict(every=1, keep=3, best_metric="eval/prompt_level_strict",
                                     async_save=True))
  # held-out eval every `every` steps (and at the end); samples.jsonl gets num_samples of it
  # eval.path: an IFEval-format JSONL (e.g. IFBench_test.jsonl) instead of the held-out split
  # at_start: also evaluate the initial policy (logged as step 0, the curve's baseline)
  # sampled: also k samples per prompt at the rollout's temperature from a fixed key, logged
  # as eval/sampled/<metric> (0: greedy only)
  c.eval = mlc.ConfigDict(dict(every=4, num_prompts=16, num_samples=4, path="", at_start=True,
                               sampled=0))
  # wandb: Weights & Biases beside TensorBoard (pip install -r requirements-wandb.txt);
  # mode offline writes <workdir>/wandb/ for `wandb sync` (no network needed), online streams;
  # name: default the workdir's name
  c.log = mlc.ConfigDict(dict(tensorboard=True, plot=True, wandb=mlc.ConfigDict(dict(
      enabled=False, project="rljax", entity="", name="", mode="offline"))))
  if a.cpu:
    apply_cpu(c)
  if a.gpu:  # float32 master weights, bfloat16 matmuls; cuDNN attention (rljax.models.backend)
    c.model.dtype, c.model.attention = "bfloat16", "auto"
  if a.tiny:
    apply_tiny(c)
  if a.steps:
    c.train.steps = a.steps
  if a.pack:
    c.train.pack = True
  if a.lora or a.qlora:
    apply_lora(c, a.lora or 16, a.qlora)
  return c


def apply_lora(c: mlc.ConfigDict, rank: int, base_bits: int = 0) -> None:
  """Adapters of rank `rank` on every projection (alpha 32), over a float (base_bits 0) or
  integer (8 / 4: QLoRA) frozen base, with 10x the learning rate of full fine-tuning (the
  usual ratio for LoRA at this alpha)."""
  c.model.lora.rank, c.model.lora.base_bits = int(rank), int(base_bits)
  c.optim.lr = 10 * c.optim.lr


# The main job's criteria: ones SmolLM2-135M satisfies sometimes within 48 tokens (15-60 %
# in study 2), so that groups of 4 samples disagree and GRPO has a signal.
CPU_CRITERIA = ("detectable_format:title", "keywords:existence", "keywords:frequency",
                "detectable_content:number_placeholders",
                "detectable_format:number_highlighted_sections",
                "detectable_format:constrained_response", "change_case:capital_word_frequency",
                "detectable_content:postscript")


def apply_cpu(c: mlc.ConfigDict) -> None:
  """The README's main job (≈ 10 min on 2 CPU cores): SmolLM2, 4 prompts × 4 samples, 1 or 2
  criteria from CPU_CRITERIA, 2 mini-batches of whole groups (2 PPO updates per rollout
  batch), lr 5e-5 (the paper's 1e-6 moves nothing in 8 steps), held-out eval of 32 prompts
  at steps 0, 4 and 8."""
  c.data.batch_size, c.rollout.num_generations = 16, 4
  c.train.inner_epochs, c.train.num_minibatches = 1, 2
  c.data.instruction_ids, c.data.max_criteria = CPU_CRITERIA, 2
  c.data.max_prompt_len = 96  # the longest prompt of this data is 94 tokens
  c.optim.lr = 5e-5
  c.eval.num_prompts = 32


def apply_tiny(c: mlc.ConfigDict) -> None:
  """A seconds-long run: random 2-layer model, short prompts and responses, high lr."""
  c.model.tiny = True
  c.data.num_train, c.data.num_heldout, c.data.max_criteria = 64, 16, 1
  # a criterion that 4 random tokens satisfy sometimes, so a random model can learn it
  c.data.instruction_ids = ("change_case:english_lowercase",)
  c.data.batch_size, c.data.max_prompt_len = 16, 160
  c.rollout.num_generations, c.rollout.max_new_tokens = 8, 4
  c.rollout.top_k = 32
  c.train.truncate_logprobs = True  # the trainer scores the sampler's top-k distribution too
  c.train.inner_epochs, c.train.num_minibatches = 2, 2  # 4 PPO updates, 1 group each
  c.optim.lr = 1e-2
  c.train.steps = 4
  c.eval.num_prompts, c.eval.at_start = 4, False
  c.log.tensorboard = False
  c.log.plot = False


def plain_config(arg, loss: str = "grpo", loss_kwargs=None, advantage: str = "grpo"):
  """The base without CoRT token weights: one of the plain objectives."""
  c = base_config(arg)
  c.objective.transforms = ()
  c.objective.transform_kwargs = {}
  c.objective.advantage = advantage
  c.objective.loss = loss
  c.objective.loss_kwargs = dict(loss_kwargs or {})
  return c
