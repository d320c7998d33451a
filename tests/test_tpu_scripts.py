"""tpu_scripts/pod.py --dry_run prints every gcloud command (and runs none)."""
import os
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = ["--name", "rl", "--zone", "us-east5-a", "--dry_run"]


def _dry(*args):
  out = subprocess.run([sys.executable, os.path.join(ROOT, "tpu_scripts", "pod.py"), args[0],
                        *BASE, *args[1:]], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PATH="/nonexistent"))  # no gcloud needed
  assert out.returncode == 0, out.stderr
  return [shlex.split(line[2:]) for line in out.stdout.splitlines() if line.startswith("+ ")]


def _tpu(verb):
  return ["gcloud", "compute", "tpus", "tpu-vm", verb, "rl", "--zone=us-east5-a"]


def test_create_spot_slice():
  (cmd,) = _dry("create", "--accelerator", "v5p-16", "--spot")
  assert cmd == _tpu("create") + ["--accelerator-type=v5p-16", "--version=v2-alpha-tpuv5",
                                  "--spot"]


def test_install_builds_python_311_with_uv_on_every_worker():
  tar, scp, ssh = _dry("install")
  assert tar[:2] == ["tar", "-C"] and tar[-1] == "."
  assert scp == ["gcloud", "compute", "tpus", "tpu-vm", "scp", "/tmp/rljax_checkout.tgz",
                 "rl:~/rljax.tgz", "--zone=us-east5-a", "--worker=all"]
  assert ssh[:7] == _tpu("ssh") and ssh[7] == "--worker=all"
  script = ssh[8]
  assert script.startswith("--command=set -e; ")
  for part in ("uv python install 3.11", "uv venv --allow-existing --python 3.11 .venv",
               "-r requirements-tpu.txt", "sys.version_info >= (3, 11)"):
    assert part in script, part


def test_launch_logs_stop_delete():
  (launch,) = _dry("launch", "--config", "configs/pod.py:model=qwen3_4b", "--workdir",
                   "gs://b/run", "--run", "q4", "--", "--config.model.path=/data/q")
  assert launch[:8] == _tpu("ssh") + ["--worker=all"]
  cmd = launch[8]
  assert cmd.startswith("--command=cd ~/rljax && ")
  assert "RLJAX_DISTRIBUTED=1" in cmd and "nohup .venv/bin/python -m rljax.train" in cmd
  assert ("--config configs/pod.py:model=qwen3_4b --workdir=gs://b/run "
          "--config.model.path=/data/q >> ~/rljax_q4.log") in cmd
  assert cmd.endswith("echo $! > ~/rljax_q4.pid")
  (logs,) = _dry("logs", "--run", "q4", "--follow")
  assert logs[7] == "--worker=0" and logs[8] == "--command=tail -n 100 -f ~/rljax_q4.log"
  (stop,) = _dry("stop", "--run", "q4")
  assert stop[7] == "--worker=all" and "kill -TERM $(cat ~/rljax_q4.pid)" in stop[8]
  (delete,) = _dry("delete")
  assert delete == _tpu("delete") + ["--quiet"]


def test_resume_recreates_a_preempted_slice_and_relaunches_the_same_run():
  cmds = _dry("resume", "--accelerator", "v5litepod-16", "--spot", "--config", "c.py",
              "--workdir", "gs://b/run")
  verbs = [c[4] if c[0] == "gcloud" else c[0] for c in cmds]
  assert verbs == ["describe", "delete", "create", "tar", "scp", "ssh", "ssh"]
  assert "--spot" in cmds[2] and "--accelerator-type=v5litepod-16" in cmds[2]
  assert "--workdir=gs://b/run" in cmds[-1][-1]


def test_launch_without_workdir_is_refused():
  out = subprocess.run([sys.executable, os.path.join(ROOT, "tpu_scripts", "pod.py"), "launch",
                        "--config", "c.py", *BASE], capture_output=True, text=True, timeout=60)
  assert out.returncode != 0 and "launch needs --config and --workdir" in out.stderr


def test_shell_wrappers_dry_run():
  env = dict(os.environ, TPU_NAME="rl", ZONE="us-east5-a", DRY_RUN="1")
  out = subprocess.run(["bash", os.path.join(ROOT, "tpu_scripts", "launch.sh"), "c.py:x=1",
                        "--workdir=gs://b/r", "--config.seed=3"], capture_output=True,
                       text=True, timeout=60, env=env)
  assert out.returncode == 0, out.stderr
  (line,) = [x for x in out.stdout.splitlines() if x.startswith("+ gcloud")]
  assert "--config c.py:x=1 --workdir=gs://b/r --config.seed=3 >>" in line
  out = subprocess.run(["bash", os.path.join(ROOT, "tpu_scripts", "delete_pod.sh"),
                        "--dry_run"], capture_output=True, text=True, timeout=60, env=env)
  assert out.stdout.strip() == "+ gcloud compute tpus tpu-vm delete rl --zone=us-east5-a --quiet"
