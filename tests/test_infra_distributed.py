"""Multi-process runs: two processes on 127.0.0.1 train as one with 4 devices,
and decode as one with 8 on split parameters.

Each process gets 2 (training) or 4 (decoding) simulated CPU devices and
talks to the other through gloo CPU collectives (jax's default on CPU);
in training they feed their own rows of each global batch, checkpoint into
one workdir, and resume from it; in decoding (tests/distributed_decode.py)
they hold their devices' parts of the parameters and cache.
"""

import os
import re
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

import distributed_decode
import xla_flags
from bpd_jax import generate
from bpd_jax.infra import distributed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ['--config=configs/demo.py:quick', '--config.task.sizes.train=400',
        '--config.task.sizes.validation=8', '--config.model.d_model=32',
        '--config.model.d_ff=64', '--config.model.num_proposal_heads=1',
        '--config.train.batch_size=16', '--config.train.head_steps=0',
        '--config.train.warmup_steps=4', '--config.train.log_every=2',
        '--config.train.tokens_per_batch=0',  # Batches of batch_size pairs.
        # The test extends a 6-step run to 10 steps: a linear decay spans
        # the phase's length, so only rsqrt's rates stay those of one run.
        '--config.train.schedule=rsqrt',
        '--config.eval.ks=()', '--config.eval.after_training=false']
LOSS = re.compile(r'^step (\d+)/\d+ \| loss ([0-9.]+)', re.M)


@pytest.mark.parametrize('env,expected', [
    ({}, False),
    ({'JAX_COORDINATOR_ADDRESS': '10.0.0.1:1234'}, True),
    ({'SLURM_NTASKS': '1'}, False),
    ({'SLURM_NTASKS': '4'}, True),
    ({'TPU_WORKER_HOSTNAMES': 'host0'}, False),
    ({'TPU_WORKER_HOSTNAMES': 'host0,host1'}, True),
])
def test_multiprocess_is_detected_from_the_environment(monkeypatch, env,
                                                       expected):
  for name in ('JAX_COORDINATOR_ADDRESS', 'SLURM_NTASKS',
               'TPU_WORKER_HOSTNAMES'):
    monkeypatch.delenv(name, raising=False)
  for name, value in env.items():
    monkeypatch.setenv(name, value)
  calls = []
  monkeypatch.setattr(jax.distributed, 'initialize',
                      lambda **kwargs: calls.append(kwargs))
  assert distributed.is_multiprocess() == expected
  if 'JAX_COORDINATOR_ADDRESS' in env:
    with pytest.raises(ValueError, match='also set JAX_NUM_PROCESSES'):
      distributed.initialize()
    monkeypatch.setenv('JAX_NUM_PROCESSES', '2')
    monkeypatch.setenv('JAX_PROCESS_ID', '1')
  distributed.initialize()
  expected_calls = {
      False: [],
      True: [dict(num_processes=2, process_id=1)
             if 'JAX_COORDINATOR_ADDRESS' in env else {}]}[expected]
  assert calls == expected_calls


def free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def start(workdir, steps, devices, *flags, **env):
  return subprocess.Popen(
      [sys.executable, '-m', 'bpd_jax.main', *TINY, f'--workdir={workdir}',
       f'--config.train.base_steps={steps}', *flags],
      cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      env={**os.environ, 'JAX_PLATFORMS': 'cpu',
           'XLA_FLAGS': f'--xla_force_host_platform_device_count={devices}',
           **env})


def finish(process):
  try:
    out, err = process.communicate(timeout=600)
  except subprocess.TimeoutExpired:
    process.kill()
    out, err = process.communicate()
  assert process.returncode == 0, err[-3000:]
  return out


def run_two_processes(workdir, steps, *flags):
  """Both processes' stdout, from one job of 2 processes x 2 devices."""
  port = free_port()
  processes = [start(workdir, steps, 2, *flags,
                     JAX_COORDINATOR_ADDRESS=f'127.0.0.1:{port}',
                     JAX_NUM_PROCESSES='2', JAX_PROCESS_ID=str(i))
               for i in range(2)]
  return [finish(p) for p in processes]


@pytest.mark.slow
def test_two_processes_train_checkpoint_and_resume_as_one(tmp_path):
  first = run_two_processes(tmp_path / 'two', 6)
  # Then evaluation at batch size 1: each process decodes on one device.
  resumed = run_two_processes(tmp_path / 'two', 10,
                              '--config.eval.after_training=true',
                              '--config.eval.num_examples=3')
  single = finish(start(tmp_path / 'one', 10, 4))
  for index, out in enumerate(resumed):
    assert 'Resumed from step 6' in out
    assert (f"Mesh {{'data': 4}} over 4 devices in 2 process(es); this is "
            f'process {index}.') in out
  assert "Mesh {'data': 4} over 4 devices in 1 process(es)" in single
  for out in resumed:
    assert 'decoding on one device per process' in out
  assert '| greedy ' in resumed[0]  # Process 0 prints the table.
  assert (tmp_path / 'two' / 'eval_validation.json').exists()
  expected = LOSS.findall(single)
  assert [s for s, _ in expected] == ['2', '4', '6', '8', '10']
  for process in range(2):
    losses = LOSS.findall(first[process]) + LOSS.findall(resumed[process])
    assert losses == expected, (process, losses, expected)
  assert float(expected[-1][1]) < float(expected[0][1])  # It learns.


@pytest.mark.slow
def test_two_processes_read_their_own_wmt_shards(tmp_path):
  """runlocal WMT14 (TFDS mock data) in 2 processes: process 0 trains the
  vocabulary, each encodes its own shard, both draw the same buckets."""
  port = free_port()
  flags = ['--config=configs/wmt14_base.py:runlocal',
           '--config.eval.after_training=false', f'--workdir={tmp_path}']
  processes = [subprocess.Popen(
      [sys.executable, '-m', 'bpd_jax.main', *flags], cwd=ROOT,
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      env={**os.environ, 'JAX_PLATFORMS': 'cpu',
           'XLA_FLAGS': '--xla_force_host_platform_device_count=2',
           'JAX_COORDINATOR_ADDRESS': f'127.0.0.1:{port}',
           'JAX_NUM_PROCESSES': '2', 'JAX_PROCESS_ID': str(i)})
      for i in range(2)]
  outs = [finish(p) for p in processes]
  assert LOSS.findall(outs[0]) == LOSS.findall(outs[1])
  # Logged every 2 steps and at the checkpoint of step 5.
  assert [s for s, _ in LOSS.findall(outs[0])] == ['2', '4', '5', '6']
  for out in outs:
    assert 'Buckets (length: global rows): 16: 32, 32: 16' in out
  data = tmp_path / 'data'
  assert sorted(os.listdir(data)) == [
      f'wmt14_translate_de-en.mock.train.{i}-of-2.npz' for i in range(2)]
  assert (tmp_path / 'vocab.model').exists()


@pytest.mark.slow
def test_two_processes_decode_on_split_parameters(tmp_path):
  """Two processes of 4 devices each decode on a (2, 4) mesh with the
  'tensor' rules (parameters and cache split over 'model', the batch over
  'data', XLA's collectives over gloo between the processes): greedy and
  exact blockwise decoding give the tokens of one device in one process."""
  port, out = free_port(), tmp_path / 'tokens.npz'
  processes = [subprocess.Popen(
      [sys.executable, os.path.join(ROOT, 'tests', 'distributed_decode.py'),
       str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      text=True,
      env={**os.environ, 'JAX_PLATFORMS': 'cpu',
           'XLA_FLAGS': '--xla_force_host_platform_device_count=4 '
                        + xla_flags.COMPILE_FAST,
           'JAX_COORDINATOR_ADDRESS': f'127.0.0.1:{port}',
           'JAX_NUM_PROCESSES': '2', 'JAX_PROCESS_ID': str(i)})
      for i in range(2)]
  for process in processes:
    finish(process)
  decoded = np.load(out)
  # Each device holds about a quarter of the parameters (norms and the
  # biases added after an all-reduce whole), not all of them.
  assert 0.25 <= float(decoded['param_fraction']) < 0.3
  with jax.enable_x64(True):
    model, inputs = distributed_decode.case()
    decoder = generate.Decoder(model)
    for name, options in distributed_decode.DECODES.items():
      np.testing.assert_array_equal(
          decoded[name], decoder.decode(inputs, options).tokens, name)


def test_made_once_makes_a_missing_file_and_only_then(tmp_path):
  path = str(tmp_path / 'f.txt')
  calls = []
  make = lambda: (calls.append(1), open(path, 'w').close())
  distributed.made_once(path, make, wait=True, what='test file')
  distributed.made_once(path, make, wait=True, what='test file')
  assert calls == [1]
  with pytest.raises(FileNotFoundError, match='test file .* not found after '
                     'process 0 made it'):
    distributed.made_once(str(tmp_path / 'g.txt'), lambda: None, wait=True,
                          what='test file')
