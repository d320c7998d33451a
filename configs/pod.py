"""Paper-scale runs on TPU pods: the Qwen3-4B, Qwen2.5-7B and Qwen3-14B shapes.

`configs/pod.py:model=qwen3_4b` (or qwen2_5_7b, qwen3_14b) is CoRT-GRPO with the CSR reward;
`objective=grpo|dapo|gspo`, `cort=False` (the baseline) and `reward=csr|aon` give every row
of the CoRT paper's tables (`PAPER_ROWS`, with the paper's numbers; experiments/README.md,
study 6). `model.path` points at the
public config.json shipped in configs/models/<model>/ (shapes only: enough for
`python -m rljax.aot`); to train, point it at the weights:
`--config.model.path=/data/Qwen3-4B`. `placement=disaggregated` puts the sampler on half of
the slice and the trainer on the other half, the sampler one policy version behind
(`rollout.max_staleness=1`: it draws batch t + 1 while batch t trains); pair it with an
off-policy correction (`objective=...` with TIS / MIS, configs/tis.py) for long runs.
Each setting names the slice it was compiled for
(`topology`, a `jax.experimental.topologies` name) with the mesh, remat, batch and
gradient accumulation that fit there (experiments/README.md, "Pods: AOT compile").
"""
from configs import cort_dapo, cort_grpo, cort_gspo, dapo, grpo, gspo
from configs.common import apply_lora, parse_arg

# (objective, cort) -> the config module whose objective block the pod run uses; GSPO with
# CoRT is the token-level GSPO (normalized token weights cancel in the sequence ratio)
OBJECTIVES = {("grpo", True): cort_grpo, ("grpo", False): grpo, ("dapo", True): cort_dapo,
              ("dapo", False): dapo, ("gspo", True): cort_gspo, ("gspo", False): gspo}

# The CoRT paper's result rows (seed summary 000, tables 1-3 and the AON table), as
# (model, reward, objective, cort, {metric: paper value}); AON rows report CoRT's gain only.
PAPER_ROWS = (
    ("qwen3_4b", "csr", "grpo", False, {"IFEval-P": 84.29, "IFEval-I": 89.21, "IFBench-P": 32.31,
                                        "IFBench-I": 33.43, "MultiDimIF": 74.38, "AdvIF": 79.81}),
    ("qwen3_4b", "csr", "grpo", True, {"IFEval-P": 86.06, "IFEval-I": 90.48, "IFBench-P": 34.49,
                                       "IFBench-I": 36.24, "MultiDimIF": 80.48, "AdvIF": 81.14}),
    ("qwen2_5_7b", "csr", "grpo", False, {"IFEval-P": 78.56, "IFEval-I": 84.41,
                                          "IFBench-P": 28.23, "IFBench-I": 29.85,
                                          "MultiDimIF": 66.67, "AdvIF": 72.00}),
    ("qwen2_5_7b", "csr", "grpo", True, {"IFEval-P": 81.92, "IFEval-I": 87.51,
                                         "IFBench-P": 34.63, "IFBench-I": 36.30,
                                         "MultiDimIF": 78.52, "AdvIF": 73.28}),
    ("qwen3_4b", "aon", "grpo", False, {}),
    ("qwen3_4b", "aon", "grpo", True, {"IFEval-P Δ": 1.67, "IFBench-P Δ": 2.11,
                                       "MultiDimIF Δ": 7.35}),
    ("qwen2_5_7b", "aon", "grpo", False, {}),
    ("qwen2_5_7b", "aon", "grpo", True, {"IFEval-P Δ": 2.33, "IFBench-P Δ": -2.31,
                                         "MultiDimIF Δ": 10.22}),
    ("qwen3_14b", "csr", "grpo", False, {"IFEval-P": 87.87, "IFEval-I": 92.34,
                                         "IFBench-P": 39.93, "MultiDimIF": 82.59}),
    ("qwen3_14b", "csr", "grpo", True, {"IFEval-P": 89.17, "IFEval-I": 93.28,
                                        "IFBench-P": 40.68, "MultiDimIF": 83.48}),
    ("qwen3_4b", "csr", "dapo", False, {"IFEval-P": 87.10, "IFEval-I": 88.90,
                                        "IFBench-P": 40.27, "MultiDimIF": 83.41}),
    ("qwen3_4b", "csr", "dapo", True, {"IFEval-P": 87.95, "IFEval-I": 90.20,
                                       "IFBench-P": 41.30, "MultiDimIF": 84.06}),
    ("qwen3_4b", "csr", "gspo", False, {"IFEval-P": 86.14, "IFEval-I": 91.10,
                                        "IFBench-P": 35.97, "MultiDimIF": 82.26}),
    ("qwen3_4b", "csr", "gspo", True, {"IFEval-P": 86.54, "IFEval-I": 91.20,
                                       "IFBench-P": 36.11, "MultiDimIF": 81.96}),
)


def row_arg(model: str, reward: str, objective: str, cort: bool) -> str:
  """The `:arg` of configs/pod.py for one paper row."""
  return f"model={model},objective={objective},cort={cort},reward={reward}"

# model -> (topology, mesh shape, grad_accum); all fsdp over the slice, f32 master params,
# bf16 matmuls, rematerialized layers. grad_accum splits each 32-row mini-batch into
# micro-batches of whole groups with at least one row per chip.
SETTINGS = {
    "qwen3_4b": ("v5p:2x2x2", (1, -1, 1), 2),
    "qwen2_5_7b": ("v5p:2x2x4", (1, -1, 1), 2),
    "qwen3_14b": ("v5p:2x4x4", (1, -1, 1), 1),
}


# placement=disaggregated: the sampler on half the slice, the trainer's mesh on the other
# half. The trainer is data parallel over the hosts and fsdp within each: libtpu 0.0.52 aborts
# compiling the step's all-reduces over a 4-chip fsdp axis spanning two hosts
# ("rotated_pincer_emitter_base.cc: Check failed: get_loop_bound(color) == loop_bound").
DISAGGREGATED = {"qwen3_4b": (2, -1, 1)}

# lora=R: rank-R adapters on every projection over the frozen float base (qlora=8|4: an
# integer base), on a quarter of the full fine-tuning slice: (topology, mesh, grad_accum).
# No optimizer state or weight gradient for the base: its f32 copy and the merged weights
# the sampler reads are what stay per chip.
LORA_SETTINGS = {
    "qwen3_14b": ("v5p:2x2x2", (1, -1, 1), 2),
}


def get_config(arg=None):
  a = parse_arg(arg, model="qwen3_4b", objective="grpo", cort=True, reward="csr",
                placement="colocated", lora=0, qlora=0)
  if a.model not in SETTINGS:
    raise ValueError(f"unknown pod model {a.model!r}; valid: {', '.join(SETTINGS)}")
  if (a.objective, True) not in OBJECTIVES:
    raise ValueError(f"unknown pod objective {a.objective!r}; valid: grpo, dapo, gspo")
  if a.reward not in ("csr", "aon"):
    raise ValueError(f"unknown pod reward {a.reward!r}; valid: csr, aon")
  topology, mesh, accum = SETTINGS[a.model]
  lora = a.lora or (16 if a.qlora else 0)
  if lora:
    if a.model not in LORA_SETTINGS:
      raise ValueError(f"lora: a compiled setting exists for {', '.join(LORA_SETTINGS)} only, "
                       f"not {a.model!r}")
    topology, mesh, accum = LORA_SETTINGS[a.model]
  c = OBJECTIVES[(a.objective, bool(a.cort))].get_config()
  c.reward.name = a.reward
  c.topology = topology
  c.model.path = f"configs/models/{a.model}"
  c.model.param_dtype, c.model.dtype, c.model.remat = "float32", "bfloat16", "full"
  # dense attention's causal query blocks of 512 (5 per 2560-token row): blocks of 64 unroll
  # 40 per layer; the one-layer 4B train program compiled in 119 s with 512 against 354 s with
  # 64 on a 2-core box, for about the same temporaries per chip (13.8 vs 13.7 GiB)
  c.model.causal_block = 512
  c.mesh.shape = mesh
  # 16 prompts x 8 samples, rubric prompts up to 512 tokens, responses up to 2048
  c.data.batch_size, c.data.max_prompt_len, c.data.max_replay_prompt_len = 128, 512, 256
  c.data.num_train, c.data.num_heldout, c.data.max_criteria = 8192, 512, 4
  c.rollout.num_generations, c.rollout.max_new_tokens = 8, 2048
  c.train.grad_accum, c.train.steps, c.train.logprob_chunk = accum, 500, 512
  # the paper's μ = 4 PPO updates per rollout batch: 4 mini-batches of 4 whole groups
  c.train.inner_epochs, c.train.num_minibatches = 1, 4
  if c.objective.overlong_cache:  # DAPO's soft overlong punishment: a quarter of the length
    c.objective.overlong_cache = c.rollout.max_new_tokens // 4
  c.optim.lr, c.optim.warmup_steps = 1e-6, 10
  c.checkpoint.every, c.eval.every, c.eval.num_prompts = 25, 25, 128
  if lora:
    apply_lora(c, lora, a.qlora)
  if a.placement == "disaggregated":
    if a.model not in DISAGGREGATED:
      raise ValueError(f"placement=disaggregated has a compiled setting for "
                       f"{', '.join(DISAGGREGATED)} only, not {a.model!r}")
    c.rollout.placement, c.rollout.num_devices = "disaggregated", chips(topology) // 2
    c.rollout.max_staleness = 1
    c.mesh.shape = DISAGGREGATED[a.model]
  elif a.placement != "colocated":
    raise ValueError(f"unknown pod placement {a.placement!r}; valid: colocated, disaggregated")
  return c


def chips(topology: str) -> int:
  """'v5p:2x2x2' -> 8."""
  n = 1
  for x in topology.split(":")[1].split("x"):
    n *= int(x)
  return n
