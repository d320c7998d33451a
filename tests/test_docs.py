"""The docs: README.md is short and links only to files in the repository, every docs/ page
has commands that run (the fenced blocks after a `<!-- test: ... -->` line are executed here,
from a scratch directory holding the repository's configs/ and examples/), and no doc
narrates how the project was built or points outside the repository."""
import glob
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
TAG = "<!-- test"
DOCS = ["README.md", *[os.path.relpath(p, ROOT) for p in PAGES], "bench/README.md",
        "experiments/README.md", *[os.path.relpath(p, ROOT) for p in
                                   glob.glob(os.path.join(ROOT, "rljax", "**", "README.md"),
                                             recursive=True)]]
HISTORY = re.compile(r"session [0-9]|this session|the issue|\.\./shared", re.IGNORECASE)


def blocks_to_run(path):
  """[(line, language, code)] of the fenced blocks that follow a test tag."""
  lines, out, i = open(path).read().splitlines(), [], 0
  while i < len(lines):
    if lines[i].startswith(TAG):
      fence = lines[i + 1]
      assert fence.startswith("```"), f"{path}:{i + 2}: a test tag must precede a fence"
      j = i + 2
      while not lines[j].startswith("```"):
        j += 1
      out.append((i + 2, fence[3:].strip(), "\n".join(lines[i + 2:j])))
      i = j
    i += 1
  return out


BLOCKS = [(os.path.relpath(p, ROOT), *b) for p in PAGES for b in blocks_to_run(p)]


def test_readme_is_short_and_every_page_is_linked_and_tested():
  readme = open(os.path.join(ROOT, "README.md")).read()
  assert len(readme.splitlines()) <= 150
  assert PAGES, "docs/ has no pages"
  for page in PAGES:
    rel = os.path.relpath(page, ROOT)
    assert f"]({rel})" in readme, f"README.md does not link {rel}"
    assert blocks_to_run(page), f"{rel} has no tested block"


@pytest.mark.parametrize("doc", DOCS)
def test_links_resolve_and_no_history(doc):
  text = open(os.path.join(ROOT, doc)).read()
  hits = [m.group(0) for m in HISTORY.finditer(text)]
  assert not hits, f"{doc}: {hits}"
  for target in re.findall(r"\]\(([^)#\s]+)", text):
    if "://" in target:
      continue
    path = os.path.normpath(os.path.join(ROOT, os.path.dirname(doc), target))
    assert os.path.exists(path), f"{doc}: link {target} does not exist"


@pytest.mark.parametrize("page,line,lang,code", BLOCKS,
                         ids=[f"{p}:{line}" for p, line, _, _ in BLOCKS])
def test_doc_block_runs(tmp_path, page, line, lang, code):
  for name in ("configs", "examples", "bench", "tests", "tpu_scripts", "pytest.ini"):
    os.symlink(os.path.join(ROOT, name), tmp_path / name)
  env = dict(os.environ, PYTHONPATH=ROOT, HF_HUB_OFFLINE="1")
  if lang == "bash":
    cmd = ["bash", "-euo", "pipefail", "-c", code.replace("python ", f"{sys.executable} ")]
  else:
    assert lang == "python", f"{page}:{line}: unknown block language {lang!r}"
    cmd = [sys.executable, "-c", code]
  proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, f"{page}:{line} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
  assert proc.stdout.strip(), f"{page}:{line} printed nothing"
