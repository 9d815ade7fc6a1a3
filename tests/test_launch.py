"""launch/: the sweep's grid and checks, the TPU-pod and GPU-cluster scripts
(with fake gcloud / srun on PATH that record how they are called)."""

import importlib.util
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCH = os.path.join(ROOT, 'launch')


def load_sweep():
  spec = importlib.util.spec_from_file_location(
      'sweep', os.path.join(LAUNCH, 'sweep.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_sweep_prints_one_checked_run_per_grid_point(capsys):
  sweep = load_sweep()
  code = sweep.main(['--config=configs/wmt14_base.py', '--workdir=/runs',
                     '--grid=k=2,4,8 base=frozen,finetuned '
                     'train.head_steps=500', '--fixed=data_dir=/data'])
  assert code == 0
  lines = capsys.readouterr().out.splitlines()
  assert len(lines) == 6
  assert lines[0] == (
      'python -m bpd_jax.main --config=configs/wmt14_base.py:data_dir=/data,'
      'k=2,base=frozen --workdir=/runs/k-2_base-frozen_train.head_steps-500 '
      '--config.train.head_steps=500')
  assert len({line.split('--workdir=')[1] for line in lines}) == 6


@pytest.mark.parametrize('grid,message', [
    ('k=2,4 beam=4', "unknown config option 'beam'"),
    ('k=2 train.stepz=3', 'train.stepz is not a config field'),
    ('k=2 optimizer.lr=3', "optimizer.lr is not a config field"),
    ('k=2 train.head_steps=many', "train.head_steps='many' is not a value"),
    ('k=2,0', 'k=0 must be >= 1'),
    ('k', "grid entry 'k' must be NAME=V1,V2"),
])
def test_sweep_stops_before_launching_anything(capsys, tmp_path, grid,
                                               message):
  sweep = load_sweep()
  marker = tmp_path / 'launched'
  code = sweep.main(['--config=configs/wmt14_base.py',
                     f'--workdir={tmp_path}', f'--grid={grid}', '--run',
                     f'--launcher=touch {marker}'])
  captured = capsys.readouterr()
  assert code == 2 and captured.out == ''
  assert message in captured.err and 'Nothing was launched' in captured.err
  assert not marker.exists()


def test_sweep_runs_each_command_with_the_launcher(capsys, tmp_path):
  sweep = load_sweep()
  log = tmp_path / 'log'
  code = sweep.main(['--config=configs/wmt14_base.py', '--workdir=/runs',
                     '--grid=k=2,4', '--run',
                     f'--launcher=sh -c "echo \\"$*\\" >> {log}" sh'])
  assert code == 0
  assert [line.split()[-1] for line in log.read_text().splitlines()] == [
      '--workdir=/runs/k-2', '--workdir=/runs/k-4']


def fake_tool(tmp_path, name):
  """An executable `name` on a PATH dir that records its arguments."""
  bin_dir = tmp_path / 'bin'
  bin_dir.mkdir(exist_ok=True)
  tool = bin_dir / name
  tool.write_text(f'#!/bin/sh\necho "{name} $*" >> {tmp_path}/calls\n')
  tool.chmod(0o755)
  return str(bin_dir)


def script(name, *args, env):
  return subprocess.run([os.path.join(LAUNCH, name), *args],
                        capture_output=True, text=True, timeout=60,
                        env={'PATH': os.environ['PATH'], **env})


def test_tpu_pod_script_creates_sets_up_and_runs_on_every_worker(tmp_path):
  path = fake_tool(tmp_path, 'gcloud') + ':' + os.environ['PATH']
  env = dict(PATH=path, TPU='bpd', ZONE='z1', TYPE='v4-32')
  for args in (['create'], ['setup'],
               ['run', 'python', '-m', 'bpd_jax.main', '--workdir=/a b']):
    result = script('tpu_pod.sh', *args, env=env)
    assert result.returncode == 0, result.stderr
  calls = (tmp_path / 'calls').read_text().splitlines()
  assert calls[0] == ('gcloud compute tpus tpu-vm create bpd --zone=z1 '
                      '--accelerator-type=v4-32 '
                      '--version=tpu-ubuntu2204-base')
  assert calls[1].startswith('gcloud compute tpus tpu-vm scp --recurse '
                             '--zone=z1 --worker=all')
  assert 'pip install -r requirements.txt' in calls[2]
  assert '--worker=all' in calls[2] and '--worker=all' in calls[3]
  assert calls[3].endswith(
      "cd ~/bpd_jax && python -m bpd_jax.main --workdir=/a\\ b ")


def test_launch_scripts_print_usage_without_arguments(tmp_path):
  for name in ('tpu_pod.sh', 'gpu_cluster.sh'):
    result = script(name, env={})
    assert result.returncode == 2 and 'launch/' in result.stderr


def test_gpu_cluster_script_sets_the_process_of_each_task(tmp_path):
  # The batch script re-runs itself as one task per node through srun.
  path = fake_tool(tmp_path, 'srun') + ':' + os.environ['PATH']
  result = script('gpu_cluster.sh', 'echo', 'hi',
                  env=dict(PATH=path, SLURM_JOB_ID='7'))
  assert result.returncode == 0, result.stderr
  assert (tmp_path / 'calls').read_text().startswith(
      'srun --ntasks-per-node=1 ')
  # Each task: the coordinator, the process count and its own index.
  result = script('gpu_cluster.sh', 'env',
                  env=dict(BPD_TASK='1', SLURM_NTASKS='4', SLURM_PROCID='3',
                           COORDINATOR_HOST='node1', PORT='1234'))
  assert result.returncode == 0, result.stderr
  assert {'JAX_COORDINATOR_ADDRESS=node1:1234', 'JAX_NUM_PROCESSES=4',
          'JAX_PROCESS_ID=3'} <= set(result.stdout.splitlines())
  result = script('gpu_cluster.sh', 'env', env={})
  assert result.returncode == 2 and 'not in a SLURM job' in result.stderr
