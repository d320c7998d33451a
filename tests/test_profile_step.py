"""bench/profile_step.py's attribution: HLO instructions filed by kind, thunk events by own time."""
import collections

import jax
import jax.numpy as jnp

from bench.profile_step import category, own_times, parse_hlo, phase


def test_instructions_are_filed_by_what_they_compute():
  def f(x, w, q, k):
    h = x @ w  # a 2-D matmul
    s = jnp.einsum("bte,bse->bts", q, k)  # a batched matmul
    return h.T.copy(), jax.nn.logsumexp(s, -1), jnp.sin(h) * 2

  args = (jnp.ones((64, 32)), jnp.ones((32, 48)), jnp.ones((2, 16, 8)), jnp.ones((2, 16, 8)))
  instrs, comps = parse_hlo(jax.jit(f).lower(*args).compile().as_text())
  kinds = collections.Counter(category(n, instrs, comps) for n in instrs)
  assert kinds["matmul 2-D"] >= 1 and kinds["matmul batched"] >= 1
  assert kinds["reduce"] >= 1 and kinds["elementwise"] >= 1
  by_op = {}
  for n, (op, *_rest) in instrs.items():
    by_op.setdefault(op, set()).add(category(n, instrs, comps))
  assert by_op.get("parameter", {"layout"}) == {"layout"}


def test_phases_follow_the_jax_op_name():
  assert phase("jit(fn)/jvp()/while/body/closed_call/nd,df->nf/dot_general") == "forward"
  assert phase("jit(fn)/transpose(jvp())/while/body/checkpoint/add_any") == "backward"
  assert phase("jit(fn)/transpose(jvp())/checkpoint/rematted_computation/div") == "remat recompute"
  assert phase("jit(fn)/add") == "update + rest"


def test_own_time_subtracts_nested_thunks_per_thread():
  ev = collections.namedtuple("ev", "name start_ns duration_ns")
  line = collections.namedtuple("line", "events")
  a = line([ev("while.1", 0, 100), ev("dot.1", 10, 30), ev("fusion.2", 50, 20),
            ev("ThunkExecutor::Execute", 0, 200), ev("copy.3", 150, 10)])
  b = line([ev("dot.1", 0, 40)])
  got = collections.Counter()
  for name, ns in own_times([a, b], {"while.1", "dot.1", "fusion.2", "copy.3"}):
    got[name] += ns
  assert got == {"while.1": 50, "dot.1": 70, "fusion.2": 20, "copy.3": 10}


def test_own_time_keeps_only_the_events_inside_the_window():
  # --decode: the prefill's thunks share the decode program's instruction names
  ev = collections.namedtuple("ev", "name start_ns duration_ns")
  line = collections.namedtuple("line", "events")
  a = line([ev("dot.1", 0, 30), ev("dot.1", 100, 30), ev("fusion.2", 110, 10),
            ev("dot.1", 190, 20)])
  got = collections.Counter()
  for name, ns in own_times([a], {"dot.1", "fusion.2"}, (100, 200)):
    got[name] += ns
  assert got == {"dot.1": 20, "fusion.2": 10}
