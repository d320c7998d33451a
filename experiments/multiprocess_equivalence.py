"""Per-step max |Δ params| between a 2-process run (jax.distributed, 2 CPU devices each) and
a 1-process / 4-device run of the same config (tests/trainer/test_multiprocess.py's setting).

  python experiments/multiprocess_equivalence.py --reference gloo -- --config.optim.lr=3e-5

`--reference gloo` starts the single process with jax.distributed too (one process of one),
so its all-reduces go through gloo like the pair's; `inproc` uses XLA's in-process
all-reduce (another summation order). Arguments after `--` go to `rljax.train` (default
config `configs/cort_grpo.py:tiny`, 3 steps). Writes results/multiprocess/<name>.json.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _env(devices, processes, process, port, cache):
  env = dict(os.environ, HF_HUB_OFFLINE="1", JAX_PLATFORMS="cpu",
             XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
             JAX_COMPILATION_CACHE_DIR=cache, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
  if port:
    env.update(JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES=str(processes),
               JAX_PROCESS_ID=str(process))
  return env


def params_at(wd, step):
  import jax
  import numpy as np
  import orbax.checkpoint as ocp
  path = os.path.join(wd, "checkpoints", "last", str(step), "state")
  with ocp.PyTreeCheckpointer() as c:
    meta = c.metadata(path)
    tree = getattr(getattr(meta, "item_metadata", meta), "tree", meta)
    args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
    state = c.restore(path, args=ocp.args.PyTreeRestore(restore_args=args))["train"]
  return [np.asarray(x, np.float64) for x in jax.tree.leaves(state["params"])]


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--reference", choices=("gloo", "inproc"), default="gloo")
  ap.add_argument("--steps", type=int, default=3)
  ap.add_argument("--name", default=None)
  ap.add_argument("train_args", nargs="*")
  a = ap.parse_args()
  import numpy as np
  tmp = tempfile.mkdtemp(prefix="mp_equiv_")
  cache = os.path.join(tmp, "cache")
  cmd = lambda wd, data: [sys.executable, "-m", "rljax.train", "--config",
                          "configs/cort_grpo.py:tiny", f"--config.train.steps={a.steps}",
                          "--config.checkpoint.every=1", f"--config.checkpoint.keep={a.steps}",
                          "--config.eval.num_prompts=0", f"--config.data.data_dir={data}",
                          *a.train_args, f"--workdir={wd}"]
  one, two = os.path.join(tmp, "one"), os.path.join(tmp, "two")
  port = _port()
  procs = [subprocess.Popen(cmd(two, os.path.join(tmp, "tfds2")), cwd=ROOT,
                            env=_env(2, 2, i, port, cache)) for i in range(2)]
  procs.append(subprocess.Popen(cmd(one, os.path.join(tmp, "tfds1")), cwd=ROOT, env=_env(
      4, 1, 0, _port() if a.reference == "gloo" else None, cache)))
  if any(p.wait() for p in procs):
    raise SystemExit(f"a run failed; see {tmp}")
  start = params_at(one, 1)  # after step 1; movement measured from there to the end
  rows = []
  for step in range(1, a.steps + 1):
    x, y = params_at(one, step), params_at(two, step)
    rows.append({"step": step, "max_abs_diff": max(float(np.max(np.abs(u - v)))
                                                   for u, v in zip(x, y) if u.size)})
    print(f"step {step}: max |params 2 proc - 1 proc| = {rows[-1]['max_abs_diff']:.3g}")
  moved = max(float(np.max(np.abs(u - v))) for u, v in zip(start, x) if u.size)
  print(f"params moved by {moved:.3g} from step 1 to {a.steps}")
  name = a.name or "_".join([a.reference] + [s.split("config.")[-1] for s in a.train_args])
  out = os.path.join(HERE, "results", "multiprocess", f"{name}.json")
  os.makedirs(os.path.dirname(out), exist_ok=True)
  with open(out, "w") as fh:
    json.dump({"reference": a.reference, "train_args": a.train_args, "steps": rows,
               "moved_step1_to_end": moved}, fh, indent=2)
  print("wrote", out)


if __name__ == "__main__":
  main()
