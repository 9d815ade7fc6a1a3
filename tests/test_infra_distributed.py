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
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

import distributed_decode
import xla_flags
from bpd_jax import generate
from bpd_jax.infra import distributed
from bpd_jax.infra import errors

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
  with pytest.raises(errors.MissingFileError, match='test file .* not '
                     'found after process 0 made it'):
    distributed.made_once(str(tmp_path / 'g.txt'), lambda: None, wait=True,
                          what='test file')


@pytest.fixture
def as_two_processes(monkeypatch):
  """Sets this process as process `index` (a function: index -> client) of
  two, over a coordination service of its own on 127.0.0.1 (jax's key-value
  store, as jax.distributed.initialize starts it, for one process)."""
  from jax._src.lib import _jax
  address = f'127.0.0.1:{free_port()}'
  service = _jax.get_distributed_runtime_service(address, 1)
  client = _jax.get_distributed_runtime_client(address, 0, init_timeout=10)
  try:  # Shut down whatever happens: a client left to the collector
    client.connect()  # aborts the process.
    monkeypatch.setattr(distributed, '_client', lambda: client,
                        raising=False)
    monkeypatch.setattr(jax, 'process_count', lambda: 2)
    monkeypatch.setattr(distributed, '_calls', {}, raising=False)

    def become(index):
      monkeypatch.setattr(jax, 'process_index', lambda: index)
      return client
    yield become
  finally:
    client.shutdown()
    service.shutdown()


def test_made_once_waits_for_process_0_with_a_timeout(tmp_path,
                                                      as_two_processes):
  as_two_processes(1)
  path = str(tmp_path / 'vocab.model')
  with pytest.raises(errors.ProcessError, match=re.escape(
      f'process 0 did not make the vocabulary {path} within 0.2 s: it is '
      f'still at work, or stuck.')):
    distributed.made_once(path, None, True, 'vocabulary', timeout_s=0.2)


def test_made_once_failure_on_process_0_reaches_the_others(
    tmp_path, as_two_processes, monkeypatch):
  """Process 0's error, in one line, is what the others end with."""
  monkeypatch.setattr(distributed, '_TELL_TIMEOUT_S', 0.2)
  monkeypatch.setattr(distributed, '_TELL_GRACE_S', 0)
  path = str(tmp_path / 'vocab.model')

  def make():
    raise errors.DataError('train.src cannot be read:\nIs a directory')
  as_two_processes(0)
  with pytest.raises(errors.DataError):
    distributed.made_once(path, make, True, 'vocabulary')
  # Process 1 is this process again, at its call of the same file.
  client = as_two_processes(1)
  distributed._calls.clear()  # Its first call, as process 0's was.
  with pytest.raises(errors.ProcessError, match=re.escape(
      f'process 0 did not make the vocabulary {path}: train.src cannot be '
      f'read: Is a directory')) as raised:
    distributed.made_once(path, make, True, 'vocabulary', timeout_s=5)
  assert '\n' not in str(raised.value)
  assert raised.value.exit_code == 1
  # It said it read the error: process 0 waits for that before it ends.
  assert client.key_value_dir_get('bpd_jax/made_once/')[-1][0].endswith(
      '#1/read/1')


def made_once_job(tmp_path, mode):
  """Both processes' (exit status, stdout, stderr) of a two-process
  tests/made_once_job.py MODE on tmp_path, and its seconds."""
  port = free_port()
  started = time.monotonic()
  processes = [subprocess.Popen(
      [sys.executable, os.path.join(ROOT, 'tests', 'made_once_job.py'),
       str(tmp_path), mode], cwd=ROOT, stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True,
      env={**os.environ, 'JAX_PLATFORMS': 'cpu',
           'JAX_COORDINATOR_ADDRESS': f'127.0.0.1:{port}',
           'JAX_NUM_PROCESSES': '2', 'JAX_PROCESS_ID': str(i)})
      for i in range(2)]
  ends = []
  for process in processes:
    try:
      out, err = process.communicate(timeout=50)  # Its own wait is 60 s.
    except subprocess.TimeoutExpired:
      process.kill()
      out, err = process.communicate()
    ends.append((process.returncode, out, err))
  return ends, time.monotonic() - started


@pytest.mark.slow
def test_two_processes_get_the_same_file_made_once_never_half_of_it(
    tmp_path):
  """Process 0 writes the file in two halves 0.5 s apart while process 1
  reads its path every millisecond: process 1 sees the whole or nothing."""
  ends, _ = made_once_job(tmp_path, 'made')
  for status, out, err in ends:
    assert (status, out) == (0, 'made: True\n'), err[-2000:]
  assert os.listdir(tmp_path) == ['made.txt']


@pytest.mark.slow
def test_a_failure_on_process_0_reaches_process_1_as_one_line(tmp_path):
  ends, seconds = made_once_job(tmp_path, 'fails')
  path = tmp_path / 'made.txt'
  reason = f'data {path}.src cannot be read: Is a directory'
  assert [(status, err.strip().splitlines()) for status, _, err in ends
          ] == [(2, [f'Error: {reason}']),
                (1, [f'Error: process 0 did not make the test file {path}: '
                     f'{reason}'])]
  assert seconds < 30  # Not the wait's 60 s.
  assert not os.listdir(tmp_path)


@pytest.mark.slow
def test_process_0_killed_while_process_1_waits(tmp_path):
  """Killed midway through the file: process 1 does not wait for ever and
  never sees half a file. jax ends it (its coordinator, process 0's, is
  gone) as fast as the wait's own error, whichever comes first."""
  ends, seconds = made_once_job(tmp_path, 'killed')
  assert ends[0][0] == -signal.SIGKILL
  status, out, err = ends[1]
  assert status != 0 and out == ''
  assert seconds < 30  # Not the wait's 60 s.
  assert 'Traceback' not in err
  assert ('process 0 did not make the test file' in err
          or 'another task died' in err), err[-2000:]
  # Only process 0's temporary file, under a name no reader opens.
  assert [name.endswith('.partial.txt') for name in os.listdir(tmp_path)
          ] == [True]
