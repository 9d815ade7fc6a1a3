"""Training runs of a tiny config: phases, frozen base, resume, devices."""

import os
import re
import signal

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bpd_jax import evaluation
from bpd_jax import losses
from bpd_jax import train
from bpd_jax.models import Transformer
from bpd_jax.models import factory
from bpd_jax.tasks import batching

from train_configs import tiny_config


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
  batch = batching.TrainBatches(task.encoded('train'), 32, 24, 24, 1)(0)
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
                                  random_head=True))
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
    curves.append([float(re.search(r'loss ([0-9.]+)', line).group(1))
                   for line in lines if line.startswith('step ')])
  assert len(curves[0]) == 6
  np.testing.assert_allclose(curves[0], curves[1], rtol=2e-3)


def test_non_finite_loss_stops_without_saving(tmp_path):
  config = tiny_config(train=dict(base_steps=12, head_steps=0,
                                  learning_rate=1e30, clip_norm=0.0,
                                  checkpoint_every=4, log_every=2))
  with pytest.raises(train.NonFiniteLoss, match='stopped without saving'):
    train.train(config, str(tmp_path), log=quiet)
  saved = [p.name for p in (tmp_path / 'checkpoints').iterdir()
           if p.name.isdigit()]
  assert all(int(s) < 12 for s in saved)


def test_periodic_evaluation(tmp_path):
  config = tiny_config(train=dict(base_steps=4, head_steps=4),
                       eval=dict(every=4, periodic_examples=4))
  lines = []
  train.train(config, str(tmp_path), log=lines.append,
              evaluate=evaluation.periodic(config))
  evals = [line for line in lines if line.startswith('eval at step')]
  assert evals and 'eval/bleu' in evals[0] and 'eval/mean_block' in evals[0]
  assert (tmp_path / 'tb').is_dir()


@pytest.mark.parametrize('fields,message', [
    (dict(base_steps=0, head_steps=0), 'must be >= 0 with a positive sum'),
    (dict(base_steps=0, head_steps=5),
     'training heads without a base phase needs a trained base'),
])
def test_bad_phase_plans(tmp_path, fields, message):
  with pytest.raises(ValueError, match=message):
    train.train(tiny_config(train=fields), str(tmp_path), log=quiet)


def test_heads_need_heads(tmp_path):
  config = tiny_config(model=dict(num_proposal_heads=1))
  with pytest.raises(ValueError, match='num_proposal_heads=1 must be >= 2'):
    train.train(config, str(tmp_path), log=quiet)


def test_warm_start_from_a_missing_run(tmp_path):
  config = tiny_config(train=dict(base_steps=0, head_steps=2,
                                  init_from=str(tmp_path / 'none')))
  with pytest.raises(FileNotFoundError, match='no checkpoint in'):
    train.train(config, str(tmp_path / 'run'), log=quiet)
