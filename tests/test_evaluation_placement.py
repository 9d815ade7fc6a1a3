"""Where an eval set is decoded: batch over the data axis, parameters as
mesh.param_rules split them."""

import jax
import pytest

from bpd_jax import evaluation
from bpd_jax import tasks
from bpd_jax.evaluation import placement
from bpd_jax.evaluation import runner
from bpd_jax.infra import errors
from bpd_jax.infra import sharding
from bpd_jax.models import factory

import train_configs


def config_on(shape, rules, batch_size=4):
  config = train_configs.tiny_config(
      mesh=dict(shape=shape, axes=('data', 'model'), param_rules=rules))
  config.eval.update(ks=(2,), num_examples=4, batch_size=batch_size)
  return config


def test_a_report_on_split_parameters_decodes_as_one_device(monkeypatch,
                                                            tmp_path):
  config = config_on((1, 1), ())
  task = tasks.load_task(config.task, '/nonexistent')
  model = factory.random_model(config, task.vocab.vocab_size)
  decoders, tokens = [], []
  real_run = runner.run

  def spy(decoder, *args, **kwargs):
    decoders.append(decoder)
    measured = real_run(decoder, *args, **kwargs)
    tokens.append([m.outputs.tokens.tolist() for m in measured])
    return measured
  monkeypatch.setattr(runner, 'run', spy)
  quiet = lambda _: None
  one = evaluation.report(config, str(tmp_path / 'one'), model, task, quiet)
  split = evaluation.report(config_on((2, 4), 'tensor'),
                            str(tmp_path / 'split'), model, task, quiet)
  timing = ('wall_s', 'tokens_per_s', 'speedup')
  untimed = lambda rows: [{name: value for name, value in row.items()
                           if name not in timing} for row in rows]
  assert untimed(one['rows']) == untimed(split['rows'])
  assert one['head_accuracy'] == split['head_accuracy']
  assert tokens[0] == tokens[1]
  kernel = decoders[1].model.decoder_layers[0].ffn.up.kernel[...]
  assert tuple(kernel.sharding.spec) == (None, 'model')


def test_the_model_is_laid_out_as_the_rules_say():
  # So that the report's passes beside decoding (perplexity, the heads'
  # accuracy) run on the mesh too, not on one device or the host.
  config = config_on((2, 4), 'tensor')
  task = tasks.load_task(config.task, '/nonexistent')
  model = factory.random_model(config, task.vocab.vocab_size)
  mesh = sharding.make_mesh((2, 4), ('data', 'model'))
  placed, placed_mesh, rules = placement.placement(model, config, mesh)
  assert placed_mesh is mesh and rules == 'tensor'
  kernel = placed.decoder_layers[0].ffn.up.kernel[...]
  assert tuple(kernel.sharding.spec) == (None, 'model')
  assert len(kernel.sharding.device_set) == 8


def test_split_parameters_need_a_batch_the_data_axis_divides():
  config = config_on((2, 4), 'tensor', batch_size=1)
  mesh = sharding.make_mesh((2, 4), ('data', 'model'))
  with pytest.raises(errors.ConfigError, match=r"eval.batch_size=1 does not "
                     r"split over the 2 devices .* mesh.param_rules='tensor'"):
    placement.placement(None, config, mesh)


def test_a_batch_that_does_not_split_decodes_on_one_device():
  config = config_on((8, 1), (), batch_size=1)
  task = tasks.load_task(config.task, '/nonexistent')
  model = factory.random_model(config, task.vocab.vocab_size)
  mesh = sharding.make_mesh((8, 1), ('data', 'model'))
  placed, placed_mesh, rules = placement.placement(model, config, mesh,
                                                   log=lambda _: None)
  assert placed_mesh is None and rules == ()
  kernel = placed.decoder_layers[0].ffn.up.kernel[...]
  assert kernel.sharding.device_set == {jax.local_devices()[0]}
