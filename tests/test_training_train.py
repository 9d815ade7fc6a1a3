"""Training runs of a tiny config: phases, frozen base, resume, devices."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import ml_dtypes  # bfloat16 for safetensors' numpy arrays.
import numpy as np
import optax
import pytest
from flax import nnx
from safetensors import numpy as safetensors_numpy

from bpd_jax import evaluation
from bpd_jax.infra import checkpoints as checkpoints_lib
from bpd_jax.infra import errors
from bpd_jax.models import factory
from bpd_jax.models import Transformer
from bpd_jax.tasks import batching
from bpd_jax.training import losses
from bpd_jax.training import optim
from bpd_jax.training import step as step_lib
from bpd_jax.training import train

from train_configs import frozen_base_run
from train_configs import ROOT
from train_configs import tiny_config

# The tiny config as a config file, for the training job in a subprocess.
TINY_CONFIG_FILE = f"""
import sys
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
from train_configs import tiny_config

def get_config():
  config = tiny_config()
  config.eval.after_training = False
  return config
"""


def training_job(tmp_path, workdir, *flags, python=()):
  """The training job on the tiny config, started in a subprocess (the
  test's XLA flags, so its programs are the in-process runs'); `python`:
  arguments before the job's own (a wrapper that execs it)."""
  config_file = tmp_path / 'tiny_config.py'
  config_file.write_text(TINY_CONFIG_FILE)
  return subprocess.Popen(
      [sys.executable, *python, '-m', 'bpd_jax.main',
       f'--config={config_file}', f'--workdir={workdir}', *flags], cwd=ROOT,
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def params_of(model):
  return nnx.state(model, nnx.Param)


def flat(params, heads=None):
  """{path: array}, optionally only the heads (True) or the base (False)."""
  out = {}
  for path, value in jax.tree_util.tree_leaves_with_path(params):
    name = jax.tree_util.keystr(path)
    if heads is None or ("'heads'" in name) == heads:
      out[name] = np.asarray(value)
  return out


def assert_params_equal(a, b):
  assert a.keys() == b.keys()
  for name in a:
    np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def quiet(_):
  pass


@pytest.fixture(scope='module')
def base_run(tmp_path_factory):
  """A base model trained for 30 steps (phase 'base' only)."""
  workdir = str(tmp_path_factory.mktemp('base'))
  config = tiny_config(train=dict(base_steps=30, head_steps=0))
  model, task = train.train(config, workdir, log=quiet)
  return config, workdir, model, task


def test_a_few_steps_reduce_the_loss(base_run):
  config, _, model, task = base_run
  batch = batching.TrainBatches(task.encoded('train'), 32, 24, 24, 1,
                                pad_id=task.vocab.pad_id)(0)
  batch = {k: jnp.asarray(v) for k, v in batch.items()}
  fresh = Transformer(factory.model_config_from(config,
                                                task.vocab.vocab_size),
                      rngs=nnx.Rngs(config.seed))

  @nnx.jit
  def loss(m):
    return losses.heads_loss(
        m, batch, first=0, count=1, label_smoothing=0.0, random_head=False,
        dropout_key=None, head_key=jax.random.key(0))[0]
  assert float(loss(model)) < 0.9 * float(loss(fresh))


def test_frozen_heads_phase_leaves_the_base_bit_identical(base_run, tmp_path):
  base_config, base_dir, base_model, _ = base_run
  config = tiny_config(train=dict(base_steps=0, head_steps=10,
                                  init_from=base_dir, freeze_base=True))
  model, _ = train.train(config, str(tmp_path), log=quiet)
  assert_params_equal(flat(params_of(model), heads=False),
                      flat(params_of(base_model), heads=False))
  # The heads did train: they moved away from their initial values.
  fresh = Transformer(model.config, rngs=nnx.Rngs(config.seed))
  trained, initial = (flat(params_of(m), heads=True) for m in (model, fresh))
  assert any(not np.array_equal(trained[n], initial[n]) for n in trained)


def test_fine_tuning_changes_the_base(base_run, tmp_path):
  _, base_dir, base_model, _ = base_run
  config = tiny_config(train=dict(base_steps=0, head_steps=4,
                                  init_from=base_dir, freeze_base=False,
                                  random_head=True,
                                  head_position_fraction=1.0))
  model, _ = train.train(config, str(tmp_path), log=quiet)
  before = flat(params_of(base_model), heads=False)
  after = flat(params_of(model), heads=False)
  assert any(not np.array_equal(before[n], after[n]) for n in before)


@pytest.fixture(scope='module')
def uninterrupted(tmp_path_factory):
  """tiny_config's run (12 base steps, then 8 head steps), not preempted."""
  return train.train(tiny_config(), str(tmp_path_factory.mktemp('whole')),
                     log=quiet)[0]


@pytest.mark.parametrize('stop_at', [
    'step 12/12',  # At the phase boundary: the next phase's fresh optimizer.
    pytest.param('step 16/20', marks=pytest.mark.slow),  # In the heads phase.
    pytest.param('step 8/12', marks=pytest.mark.slow)])  # In the first.
def test_preempted_and_resumed_run_equals_an_uninterrupted_one(
    tmp_path, uninterrupted, stop_at):
  config = tiny_config()
  workdir = str(tmp_path / stop_at.split()[1].replace('/', '_'))
  lines = []

  def preempt(line):
    lines.append(line)
    if line.startswith(stop_at):
      os.kill(os.getpid(), signal.SIGTERM)

  with pytest.raises(train.Preempted, match='rerun the same command'):
    train.train(config, workdir, log=preempt)
  resumed_lines = []
  resumed, _ = train.train(config, workdir, log=resumed_lines.append)
  # The resume is announced before any step runs.
  first_step = next(line for line in resumed_lines
                    if line.startswith(('Resumed', 'step ')))
  assert first_step.startswith('Resumed from step '
                               + stop_at.split()[1].split('/')[0])
  assert_params_equal(flat(params_of(resumed)),
                      flat(params_of(uninterrupted)))


def test_a_damaged_newest_step_is_set_aside_and_the_run_finishes(
    tmp_path, uninterrupted):
  workdir = tmp_path / 'run'
  train.train(tiny_config(), str(workdir), log=quiet)
  final = workdir / 'checkpoints' / '20'
  data = max((p for p in final.rglob('*') if p.is_file() and '/d/' in str(p)),
             key=lambda p: p.stat().st_size)
  data.write_bytes(data.read_bytes()[:data.stat().st_size // 2])
  lines = []
  # Before: restored from step 18, then stuck at saving step 20 again.
  resumed, _ = train.train(tiny_config(), str(workdir), log=lines.append)
  assert any(line.startswith('Moved the damaged step(s) '
                             f'{workdir}/damaged_checkpoints/20 aside')
             for line in lines), lines
  assert 'Resumed from step 18' in '\n'.join(lines)
  assert (workdir / 'damaged_checkpoints' / '20' / 'state').is_dir()
  assert_params_equal(flat(params_of(resumed)),
                      flat(params_of(uninterrupted)))


# A minute of subprocesses; SIGTERM's save-and-resume stays in the default run.
@pytest.mark.slow
def test_killed_during_a_save_and_resumed_equals_an_uninterrupted_run(
    tmp_path, uninterrupted):
  workdir = tmp_path / 'run'
  checkpoints = workdir / 'checkpoints'
  # A save every step, so that one is in flight when the kill comes.
  job = training_job(tmp_path, workdir, '--config.train.checkpoint_every=1')
  killed_at = None
  deadline = time.monotonic() + 300
  while job.poll() is None and time.monotonic() < deadline:
    names = [p.name for p in checkpoints.iterdir()] if checkpoints.is_dir() \
        else []
    # Orbax writes a step into N.orbax-checkpoint-tmp, then renames it.
    if any(n.isdigit() for n in names) and any(
        'orbax-checkpoint-tmp' in n for n in names):
      job.send_signal(signal.SIGKILL)
      killed_at = names
      break
    time.sleep(0.002)
  job.communicate()
  assert killed_at is not None, 'the job ended before a save was caught'
  resumed = training_job(tmp_path, workdir,
                         '--config.train.checkpoint_every=1')
  stdout, stderr = resumed.communicate(timeout=300)
  assert resumed.returncode == 0, stderr[-3000:]
  assert 'took over the lock left by bpd_jax.main' in stdout
  assert re.search(r'Resumed from step \d+', stdout), stdout
  restored = factory.restore_model(tiny_config(), str(workdir),
                                   uninterrupted.config.vocab_size)
  assert_params_equal(flat(params_of(restored)),
                      flat(params_of(uninterrupted)))


def test_a_failed_save_stops_the_job_in_one_line(tmp_path):
  # A disk that fills up: files may not grow past 100 kB (the lock and the
  # config record fit; a checkpoint does not). Python ignores SIGXFSZ, so a
  # write past the limit fails with EFBIG, as a full disk's with ENOSPC.
  limited = ('import os, resource, sys; '
             'resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000)); '
             'os.execv(sys.executable, [sys.executable, *sys.argv[1:]])')
  job = training_job(tmp_path, tmp_path / 'run', python=['-c', limited])
  stdout, stderr = job.communicate(timeout=300)
  assert job.returncode == 1
  assert stderr.splitlines() == [
      f'Error: saving checkpoint step 6 in {tmp_path}/run/checkpoints '
      'failed: File too large (errno 27).'], stderr[-3000:]
  # Stopped when that save's failure came back (at the latest when the
  # next save waits for it), not at the end of the run.
  assert 'step 20/20' not in stdout


@pytest.mark.slow
def test_8_devices_match_1_device(tmp_path):
  # Compared by loss curve: Adam divides by the root of tiny second moments,
  # so parameters whose gradients are ~0 move by rounding noise either way.
  curves = []
  for name, shape in (('one', (1,)), ('all', (-1,))):
    config = tiny_config(train=dict(base_steps=8, head_steps=4, log_every=2),
                         mesh=dict(shape=shape))
    lines = []
    train.train(config, str(tmp_path / name), log=lines.append)
    curves.append(loss_curve(lines))
  assert len(curves[0]) == 6
  np.testing.assert_allclose(curves[0], curves[1], rtol=2e-3)


def loss_curve(lines):
  return [float(re.search(r'loss ([0-9.]+)', line).group(1))
          for line in lines if line.startswith('step ')]


@pytest.mark.slow
def test_split_parameters_follow_one_device_and_restore_on_other_meshes(
    tmp_path, monkeypatch):
  # Split parameters change only the order of sums (GSPMD's all-reduces),
  # so the curves agree as the data-parallel one above does. A checkpoint
  # of the (2, 4) 'tensor' run resumes on (8, 1) 'fsdp' and on one device
  # with its parameters, placed as the new mesh's rules say. A split model
  # is built in the host's memory (a simulated device stands in for it
  # here), a replicated one on the default device, then laid out.
  host = jax.devices()[-1]
  monkeypatch.setattr(factory, 'host_device', lambda: host)
  built_on = []
  real_start = step_lib.TrainStates.start

  def start(self, params, phase):
    built_on.append({d for leaf in jax.tree.leaves(params)
                     for d in leaf.devices()})
    return real_start(self, params, phase)
  monkeypatch.setattr(step_lib.TrainStates, 'start', start)

  def run(name, shape, rules):
    config = tiny_config(
        train=dict(base_steps=8, head_steps=4, log_every=2),
        mesh=dict(shape=shape, axes=('data', 'model'), param_rules=rules))
    lines = []
    model, _ = train.train(config, str(tmp_path / name), log=lines.append)
    return model, lines

  _, one_device = run('one', (1, 1), ())
  assert built_on[0] == {jax.devices()[0]}
  tensor_model, tensor_lines = run('tensor', (2, 4), 'tensor')
  _, fsdp_lines = run('fsdp', (8, 1), 'fsdp')
  # Each run's first phase, then its heads phase on the trained base.
  assert [len(devices) for devices in built_on] == [1, 1, 1, 8, 1, 8]
  assert built_on[2] == built_on[4] == {host}
  assert len(loss_curve(one_device)) == 6
  for lines in (tensor_lines, fsdp_lines):
    np.testing.assert_allclose(loss_curve(lines), loss_curve(one_device),
                               rtol=2e-3)
  saved = flat(params_of(tensor_model))
  for shape, rules in (((8, 1), 'fsdp'), ((1, 1), ())):
    model, lines = run('tensor', shape, rules)
    assert 'Resumed from step 12' in '\n'.join(lines)
    assert_params_equal(flat(params_of(model)), saved)
    kernel = model.decoder_layers[0].ffn.up.kernel[...]
    assert len(kernel.sharding.device_set) == shape[0] * shape[1]
    assert tuple(kernel.sharding.spec) == ((None, 'data') if rules else ())


def test_non_finite_loss_stops_without_saving(tmp_path):
  config = tiny_config(train=dict(base_steps=12, head_steps=0,
                                  learning_rate=1e30, clip_norm=0.0,
                                  checkpoint_every=4, log_every=2))
  with pytest.raises(train.Diverged, match='stopped without saving'):
    train.train(config, str(tmp_path), log=quiet)
  saved = [p.name for p in (tmp_path / 'checkpoints').iterdir()
           if p.name.isdigit()]
  assert all(int(s) < 12 for s in saved)


def test_the_last_update_is_checked_before_its_save(tmp_path, monkeypatch):
  # An update that overflows: step 1's loss and gradients (computed before
  # the update) are finite, the parameters it leaves are not. The run used
  # to save that step and exit 0 (train.learning_rate=inf did this).
  monkeypatch.setattr(optim, 'make_optimizer', lambda *_, **__: (
      optax.chain(optax.sgd(1.0), optax.scale(jnp.inf))))
  config = tiny_config(train=dict(base_steps=1, head_steps=0))
  with pytest.raises(train.Diverged, match=r'NaN or infinite after step 1; '
                     r'stopped without saving\. No checkpoint was saved yet '
                     r'in .*checkpoints\.') as raised:
    train.train(config, str(tmp_path), log=quiet)
  assert raised.value.exit_code == 1  # The run's fault, not the command's.
  assert not [p for p in (tmp_path / 'checkpoints').iterdir()
              if p.name.isdigit()]


class _Store:
  """A checkpoint directory that records the steps saved."""
  directory = '/w/checkpoints'

  def __init__(self, latest):
    self.latest, self.saved = latest, []

  def latest_step(self):
    return self.latest

  def save(self, step, state):
    del state
    self.saved.append(step)


@pytest.mark.parametrize('latest,message', [
    (3, 'The last good checkpoint is step 3 in /w/checkpoints.'),
    (None, 'No checkpoint was saved yet in /w/checkpoints.'),
])
def test_a_non_finite_state_is_never_saved(latest, message):
  store = _Store(latest)
  moments = {'mu': jnp.zeros(2), 'count': jnp.int32(4)}
  for bad in ({'w': jnp.array([1.0, jnp.inf])},
              {'w': jnp.array([1.0, jnp.nan], jnp.bfloat16)}):
    with pytest.raises(train.Diverged, match=re.escape(
        f'after step 4; stopped without saving. {message}')):
      train._save(store, 4, dict(step=jnp.int32(4), params=bad,  # pylint: disable=protected-access
                                 opt_state=moments))
  with pytest.raises(train.Diverged):  # An optimizer moment alone.
    train._save(store, 4, dict(step=jnp.int32(4), params={'w': jnp.ones(2)},  # pylint: disable=protected-access
                               opt_state={'mu': jnp.full(2, jnp.inf)}))
  assert store.saved == []
  train._save(store, 4, dict(step=jnp.int32(4), params={'w': jnp.ones(2)},  # pylint: disable=protected-access
                             opt_state=moments))
  assert store.saved == [4]


def test_periodic_evaluation(tmp_path):
  config = tiny_config(train=dict(base_steps=4, head_steps=4),
                       eval=dict(every=4, periodic_examples=4))
  lines = []
  train.train(config, str(tmp_path), log=lines.append,
              evaluate=evaluation.periodic(config))
  evals = [line for line in lines if line.startswith('eval at step')]
  assert evals and 'eval/bleu' in evals[0] and 'eval/mean_block' in evals[0]
  assert (tmp_path / 'tb').is_dir()


def test_a_model_with_other_ids_than_the_task_is_refused_at_start(tmp_path):
  config = tiny_config(train=dict(base_steps=2, head_steps=0))
  config.model.eos_id = 5
  with pytest.raises(errors.ConfigError, match=r"eos_id=5.* are not the task "
                     r"vocabulary's \(pad_id=0, eos_id=1"):
    train.train(config, str(tmp_path), log=quiet)
  assert not (tmp_path / 'checkpoints').exists()


def test_warm_start_from_a_missing_run(tmp_path):
  config = tiny_config(train=dict(base_steps=0, head_steps=2,
                                  init_from=str(tmp_path / 'none')))
  with pytest.raises(FileNotFoundError, match='no checkpoint in'):
    train.train(config, str(tmp_path / 'run'), log=quiet)


@pytest.fixture(scope='module')
def frozen_run(tmp_path_factory):
  """Heads on a frozen imported model (configs/hf_heads.py on a copy of
  tiny_llama3): (config, model folder, workdir, trained model)."""
  config, folder, workdir = frozen_base_run(
      str(tmp_path_factory.mktemp('frozen')))
  return config, folder, workdir, train.train(config, workdir, log=quiet)[0]


def heads_and_optimizer_bytes(workdir: str) -> tuple[int, int]:
  """(bytes of the newest step's files, of its arrays' values)."""
  store = checkpoints_lib.Checkpoints(os.path.join(workdir, 'checkpoints'),
                                      read_only=True)
  step = store.latest_step()
  state = store.restore(step, None)
  store.close()
  step_dir = os.path.join(workdir, 'checkpoints', str(step))
  files = sum(os.path.getsize(os.path.join(d, name))
              for d, _, names in os.walk(step_dir) for name in names)
  return files, sum(np.asarray(leaf).nbytes for leaf in jax.tree.leaves(
      (state['params'], state['opt_state'])))


def test_a_frozen_imported_base_is_not_saved_again(frozen_run):
  config, folder, workdir, model = frozen_run
  store = checkpoints_lib.Checkpoints(os.path.join(workdir, 'checkpoints'),
                                      read_only=True)
  step = store.latest_step()
  saved, meta = store.restore(step, None), store.meta(step)
  store.close()
  # The heads and their optimizer state; the base's folder and fingerprint.
  assert list(saved['params']) == ['heads']
  assert meta == {factory.BASE_RECORD: {
      'folder': folder, 'fingerprint': factory.base_fingerprint(
          params_of(model))}}
  files, arrays = heads_and_optimizer_bytes(workdir)
  assert files <= 1.1 * arrays, (files, arrays)
  # Every reader rebuilds the base from the folder.
  restored = factory.restore_model(config, workdir, model.config.vocab_size)
  assert_params_equal(flat(params_of(restored)), flat(params_of(model)))


def test_a_frozen_imported_base_resumes_as_if_uninterrupted(frozen_run,
                                                            tmp_path):
  config, _, _, uninterrupted = frozen_run
  workdir = str(tmp_path / 'run')

  def preempt(line):
    if line.startswith('step 2/4'):
      os.kill(os.getpid(), signal.SIGTERM)

  with pytest.raises(train.Preempted):
    train.train(config, workdir, log=preempt)
  lines = []
  resumed, _ = train.train(config, workdir, log=lines.append)
  assert 'Resumed from step 2' in '\n'.join(lines)
  assert_params_equal(flat(params_of(resumed)),
                      flat(params_of(uninterrupted)))


def _changed(folder: str):
  """Changes one weight of the model in `folder`; returns its file's bytes
  as they were."""
  path = os.path.join(folder, 'model.safetensors')
  with open(path, 'rb') as f:
    original = f.read()
  tensors = safetensors_numpy.load_file(path)
  name = 'model.layers.0.mlp.down_proj.weight'
  value = tensors[name].copy()
  value.flat[0] = value.flat[0] + ml_dtypes.bfloat16(1)
  tensors[name] = value
  safetensors_numpy.save_file(tensors, path)
  return original


def test_a_base_folder_whose_weights_changed_is_refused(frozen_run):
  config, folder, workdir, model = frozen_run
  original = _changed(folder)
  try:
    message = (rf'^the model folder {folder} holds other weights than the '
               rf'frozen base the heads of checkpoint step 4 in '
               rf'{workdir}/checkpoints were trained on: fingerprints '
               rf'[0-9a-f]{{16}} \(the folder now\) vs [0-9a-f]{{16}} '
               rf'\(recorded\)\. Put its weights back, or train new heads on '
               rf'it in another workdir\.$')
    with pytest.raises(factory.BaseChanged, match=message):
      factory.restore_model(config, workdir, model.config.vocab_size)
    config.train.head_steps = 5  # A longer run resumes from step 4.
    with pytest.raises(factory.BaseChanged, match=message):
      train.train(config, workdir, log=quiet)
  finally:
    with open(os.path.join(folder, 'model.safetensors'), 'wb') as f:
      f.write(original)


def test_a_whole_model_checkpoint_still_restores_and_resumes(frozen_run,
                                                             tmp_path):
  """A frozen imported base saved whole, as before heads were saved alone:
  it reads back, and a resumed run saves the heads alone from then on."""
  config, folder, workdir, model = frozen_run
  store = checkpoints_lib.Checkpoints(os.path.join(workdir, 'checkpoints'),
                                      read_only=True)
  saved = store.restore(store.latest_step(), None)
  store.close()
  old = str(tmp_path / 'old')
  os.makedirs(old)
  shutil.copy(os.path.join(workdir, 'config.json'), old)
  whole = checkpoints_lib.Checkpoints(os.path.join(old, 'checkpoints'))
  whole.save(4, dict(saved, params=jax.tree.map(np.asarray, params_of(model))))
  whole.close()
  restored = factory.restore_model(config, old, model.config.vocab_size)
  assert_params_equal(flat(params_of(restored)), flat(params_of(model)))
  config.train.head_steps = 5
  lines = []
  train.train(config, old, log=lines.append)
  assert 'Resumed from step 4' in '\n'.join(lines)
  store = checkpoints_lib.Checkpoints(os.path.join(old, 'checkpoints'),
                                      read_only=True)
  assert list(store.restore(5, None)['params']) == ['heads']
  assert store.meta(5)[factory.BASE_RECORD]['folder'] == folder
  store.close()
