"""Where the train step's time goes: one traced SmolLM2 GRPO step, its XLA:CPU thunks by kind.

    python bench/profile_step.py [--remat dots] [--attention dense] [--batch 8] [--prompt 64]
                                 [--response 192] [--cort] [--top 15]
    python bench/profile_step.py --decode 32 [--new 64]

`--decode B` profiles the sampler's decode program instead: `rljax.rollout.generate` on B
rows (B / 8 random 64-token prompts × G = 8, or one prompt × B below 8), --new tokens, no
stop token, temperature 1; times are per decode step (the traced call's --new - 1 steps)
and the phase column is the program's (`decode`).

`--attention` as in bench/train_step.py: an implementation, or `dense:C` (causal query blocks of
C, `ModelConfig.causal_block`; `dense:0` is one [T, T] block).

Compiles the step that `bench/train_step.py` times (the trainer's fused μ = 1 update), runs it
twice, then traces a third call with `jax.profiler` and XLA:CPU's per-thunk events
(`--xla_cpu_enable_xprof_traceme=true`). Each thunk is an instruction of the optimized HLO
(dumped with `--xla_dump_to`), so its time is attributed by what the instruction computes:

- `matmul 2-D`: dots without batch dimensions, the projections and the LM head (what
  `bench/matmul.py` times alone: the step's matmul floor);
- `matmul batched`: dots with batch dimensions, attention's scores and values;
- `layout`: fusions of copies, transposes, slices, concatenations, pads, bitcasts, broadcasts
  and selects only: data moved, nothing computed;
- `reduce`: fusions with a reduction (softmax, RMSNorm, logsumexp, loss sums, norms);
- `elementwise`: other fusions (RoPE, SiLU, the AdamW update, masks);
- `custom call`: compiled kernels XLA calls (the sampler's CPU decode attention,
  `rljax.models.cpu_attention`);
- `control`: while / conditional / call thunks, less the thunks they ran.

and by phase, from the instruction's JAX op name: forward, backward, remat recompute (ops under
`rematted_computation`), the rest (the optimizer update, the guard). Times are each thunk's
own wall time on the thread that ran it (a matmul's helper threads are not added twice);
thunks that ran at the same time on two threads are both counted, so the column sums to a
little more than the step's wall time. Writes bench/results/profile_step.json.
"""
from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

CATEGORIES = ("matmul 2-D", "matmul batched", "layout", "reduce", "elementwise", "custom call",
              "control")
PHASES = ("forward", "backward", "remat recompute", "update + rest")
_LAYOUT_OPS = {"parameter", "copy", "transpose", "slice", "dynamic-slice", "dynamic-update-slice",
               "concatenate", "pad", "bitcast", "reshape", "broadcast", "select", "constant",
               "tuple", "get-tuple-element", "iota", "convert", "compare", "and", "or", "not"}
_INSTR = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = [^=]*? ([a-z][\w\-]*)\(")
_COMP = re.compile(r"^(?:ENTRY )?%([\w.\-]+) ")
_CALLS = re.compile(r"calls=%([\w.\-]+)")
_OPNAME = re.compile(r'op_name="([^"]*)"')


def parse_hlo(text: str):
  """Instruction name -> (opcode, op_name, computations it calls); computation -> its opcodes
  and whether any dot in it has batch dimensions."""
  instrs, comps, cur = {}, {}, None
  for line in text.splitlines():
    m = _COMP.match(line)
    if m and line.rstrip().endswith("{"):
      cur = comps.setdefault(m.group(1), {"ops": set(), "batched_dot": False, "dot": False})
      continue
    m = _INSTR.match(line)
    if not m or cur is None:
      continue
    name, op = m.groups()
    cur["ops"].add(op)
    if op in ("dot", "custom-call") and ("lhs_batch_dims" in line):
      cur["batched_dot"] = True
    if op == "dot":
      cur["dot"] = True
    opname = _OPNAME.search(line)
    instrs[name] = (op, opname.group(1) if opname else "", _CALLS.findall(line),
                    "lhs_batch_dims" in line)
  return instrs, comps


def category(name, instrs, comps) -> str:
  op, _, calls, batched = instrs.get(name, ("?", "", [], False))
  if op in ("while", "conditional", "call"):
    return "control"
  if op == "custom-call":
    return "custom call"
  if op == "dot":
    return "matmul batched" if batched else "matmul 2-D"
  ops = set().union(*(comps[c]["ops"] for c in calls if c in comps)) if calls else {op}
  if any(comps[c]["dot"] for c in calls if c in comps):
    return ("matmul batched" if any(comps[c]["batched_dot"] for c in calls if c in comps)
            else "matmul 2-D")
  if "reduce" in ops or "reduce-window" in ops or op == "reduce":
    return "reduce"
  if ops <= _LAYOUT_OPS:
    return "layout"
  return "elementwise"


def phase(opname: str) -> str:
  if "rematted_computation" in opname:
    return "remat recompute"
  if "transpose(jvp(" in opname:
    return "backward"
  if "jvp(" in opname:
    return "forward"
  return "update + rest"


def own_times(lines, hlo_names, window=None):
  """Each thunk event's own time (less the thunk events nested in it) on its thread; only
  the events inside `window` = (start_ns, end_ns) if given."""
  out = []
  lo, hi = window or (float("-inf"), float("inf"))
  for ln in lines:
    evs = sorted((e for e in ln.events if e.name in hlo_names and lo <= e.start_ns
                  and e.start_ns + e.duration_ns <= hi),
                 key=lambda e: (e.start_ns, -e.duration_ns))
    stack = []  # [name, end_ns, own_ns]
    for e in evs:
      while stack and stack[-1][1] <= e.start_ns:
        out.append(tuple(stack.pop()[::2]))
      if stack:
        stack[-1][2] -= e.duration_ns
      stack.append([e.name, e.start_ns + e.duration_ns, e.duration_ns])
    out.extend(tuple(s[::2]) for s in stack)
  return out


def decode_run(model, rows: int, new: int):
  """A call of the sampler on `rows` rows (see --decode) and what it is."""
  import jax
  import numpy as np

  from rljax.rollout import SamplerConfig, generate
  g = min(rows, 8)
  ids = np.random.RandomState(0).randint(3, model.cfg.vocab_size, (rows // g, 64))
  ids = ids.astype(np.int32)
  cfg = SamplerConfig(max_new_tokens=new, temperature=1.0, num_generations=g,
                      stop_token_ids=())
  seed = [0]

  def run():
    seed[0] += 1
    jax.block_until_ready(generate(model, ids, np.ones_like(ids), jax.random.key(seed[0]), cfg))

  return run, {"rows": rows, "new_tokens": new, "prompt": 64}


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--remat", default="dots")
  ap.add_argument("--attention", default="dense")
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--prompt", type=int, default=64)
  ap.add_argument("--response", type=int, default=192)
  ap.add_argument("--cort", action="store_true", help="the CoRT step (+ the replay forward)")
  ap.add_argument("--top", type=int, default=15)
  ap.add_argument("--decode", type=int, default=0, metavar="B",
                  help="profile the sampler's decode program on B rows instead")
  ap.add_argument("--new", type=int, default=64, help="--decode: new tokens per row")
  a = ap.parse_args()
  if a.decode and (a.decode % min(a.decode, 8) or a.new < 2):
    ap.error("--decode B: B < 8 or a multiple of 8, and --new >= 2")

  work = tempfile.mkdtemp(prefix="profile_step_")
  # libtpu's profiler plugin crashes a CPU trace when the TPU backend is tried: CPU only.
  os.environ["JAX_PLATFORMS"] = "cpu"
  module = "scoped" if a.decode else "jit_fn"  # the sampler's jits are named "scoped"
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_xprof_traceme=true"
                             f" --xla_dump_to={work}/hlo --xla_dump_hlo_as_text"
                             f" --xla_dump_hlo_module_re=.*{module}.*")
  import jax
  from jax._src.lib import _profile_data

  from bench.common import report
  from bench.train_step import make_batch, rljax_step, variant_model
  from rljax.models.bundled import smollm2_path

  model = variant_model(smollm2_path(), a.remat, a.attention)
  per = 1
  if a.decode:
    run, info = decode_run(model, a.decode, a.new)
    per = a.new - 1
  else:
    batch = make_batch(a.batch, a.prompt, a.response, model.cfg.vocab_size)
    run, info = rljax_step(model, batch, a.response, ("cort_no_ramp",) if a.cort else (), g=4)
  untraced = []
  for _ in range(2):
    t = time.perf_counter()
    run()
    untraced.append(time.perf_counter() - t)
  jax.profiler.start_trace(f"{work}/trace")
  t = time.perf_counter()
  run()
  traced = time.perf_counter() - t
  jax.profiler.stop_trace()

  # the last program compiled: the step, or the sampler's decode (compiled after its prefill)
  hlo_files = sorted(glob.glob(f"{work}/hlo/*{module}*after_optimizations.txt"))
  instrs, comps = parse_hlo(open(hlo_files[-1]).read())
  xplane = glob.glob(f"{work}/trace/**/*.xplane.pb", recursive=True)[0]
  plane = _profile_data.ProfileData.from_file(xplane).find_plane_with_name("/host:CPU")
  lines = [ln for ln in plane.lines if ln.name.startswith("tf_XLA")]
  # the longest program run: the step, or the decode (its prefill's thunks share names)
  run_ev = max((e for ln in lines for e in ln.events
                if e.name == "ThunkExecutor::Execute (wait for completion)"),
               key=lambda e: e.duration_ns)
  wall = run_ev.duration_ns / 1e9
  own = own_times(lines, set(instrs), (run_ev.start_ns, run_ev.start_ns + run_ev.duration_ns))

  by_cat = collections.defaultdict(float)
  by_phase = collections.defaultdict(float)
  grid = collections.defaultdict(float)
  by_instr = collections.defaultdict(lambda: [0.0, 0])
  for name, ns in own:
    ns /= per
    c, ph = category(name, instrs, comps), "decode" if a.decode else phase(instrs[name][1])
    by_cat[c] += ns / 1e9
    by_phase[ph] += ns / 1e9
    grid[c, ph] += ns / 1e9
    by_instr[name][0] += ns / 1e9
    by_instr[name][1] += 1
  total = sum(by_cat.values())

  wall /= per
  phases = ("decode",) if a.decode else PHASES
  cols = ["kind"] + list(phases) + ["s", "share of wall"]
  rows = [dict(zip(cols, [c] + [grid[c, p] for p in phases] + [by_cat[c], by_cat[c] / wall]))
          for c in CATEGORIES]
  rows.append(dict(zip(cols, ["all"] + [by_phase[p] for p in phases] + [total, total / wall])))
  top = sorted(by_instr.items(), key=lambda kv: -kv[1][0])[:a.top]
  top_rows = [{"instruction": n, "kind": category(n, instrs, comps),
               "phase": "decode" if a.decode else phase(instrs[n][1]),
               "calls": round(k / per, 2), "s": s,
               "JAX op": "/".join(instrs[n][1].split("/")[-2:])} for n, (s, k) in top]
  what = f"decode step ({per} traced)" if a.decode else "step"
  print(f"{what} wall (traced) {traced / per:.4f} s, executor {wall:.4f} s; untraced "
        f"{', '.join(f'{u / per:.4f}' for u in untraced)} s; load {os.getloadavg()[0]:.2f}\n")
  for r in top_rows:
    print(f"{r['s']:7.4f} s {r['calls']:6g}×  {r['kind']:<15} {r['phase']:<16} "
          f"{r['instruction']:<28} {r['JAX op']}")
  print()
  report("profile_step", cols, rows, meta={
      "args": vars(a), "untraced_s": untraced, "traced_s": traced, "executor_wall_s": wall,
      "loadavg": os.getloadavg(), "top": top_rows, "compile": info})

if __name__ == "__main__":
  main()
