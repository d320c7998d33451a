"""The import graph of `rljax` has no circle, counting imports inside functions too.

A module-level circle breaks at import time in one order and not the other; one hidden in
a function (a deferred import) still ties two modules that can then not be read, tested or
changed apart. Edges are the modules an `import` / `from ... import` statement names (the
package `__init__` a submodule lives in is not an edge: Python has it loaded already).
"""
import ast
import os

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "rljax")


def _modules(root: str, package: str) -> dict[str, str]:
  """{dotted module name: file} of every .py file under `root` (the package `package`)."""
  out = {}
  for dirpath, _, files in os.walk(root):
    rel = os.path.relpath(dirpath, root)
    parts = [package] + ([] if rel == "." else rel.split(os.sep))
    for f in files:
      if f.endswith(".py"):
        name = ".".join(parts if f == "__init__.py" else parts + [f[:-3]])
        out[name] = os.path.join(dirpath, f)
  return out


def import_graph(root: str, package: str) -> dict[str, set[str]]:
  """{module: the package's modules it imports}, every import statement of the file."""
  mods = _modules(root, package)
  graph = {}
  for name, path in mods.items():
    is_pkg = path.endswith("__init__.py")
    here = name if is_pkg else name.rsplit(".", 1)[0]
    deps = set()
    for node in ast.walk(ast.parse(open(path).read(), path)):
      targets = []
      if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:  # relative import
          up = here.split(".")[:len(here.split(".")) - node.level + 1]
          base = ".".join(up + ([base] if base else []))
        # `from pkg import mod` imports the module pkg.mod; `from mod import name` imports mod
        targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                   for a in node.names]
      for t in targets:
        while t and t not in mods:  # `import pkg.mod.attr`-style names: the module part
          t = t.rpartition(".")[0]
        if t and t != name:
          deps.add(t)
    graph[name] = deps
  return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """The strongly connected components with more than one module (Tarjan)."""
  index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

  def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in sorted(graph.get(v, ())):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      comp = []
      while True:
        w = stack.pop()
        on.discard(w)
        comp.append(w)
        if w == v:
          break
      if len(comp) > 1:
        out.append(sorted(comp))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return out


def test_rljax_has_no_import_circle():
  graph = import_graph(ROOT, "rljax")
  assert len(graph) > 50 and "rljax.loop.collect" in graph["rljax.trainer"]
  assert cycles(graph) == []


def test_a_planted_circle_is_found(tmp_path):
  """A circle through an import inside a function, across a subpackage, is reported."""
  pkg = tmp_path / "pkg"
  (pkg / "sub").mkdir(parents=True)
  (pkg / "__init__.py").write_text("")
  (pkg / "sub" / "__init__.py").write_text("from pkg.sub import b\n")
  (pkg / "a.py").write_text("import os\nfrom pkg.sub.b import f\n")
  (pkg / "sub" / "b.py").write_text("def f():\n  from pkg import a\n  return a\n")
  (pkg / "c.py").write_text("from . import a\n")
  graph = import_graph(str(pkg), "pkg")
  assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.c"] == {"pkg.a"}
  assert cycles(graph) == [["pkg.a", "pkg.sub.b"]]
