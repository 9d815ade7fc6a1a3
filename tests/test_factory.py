"""Config -> model: random and restored models of a config."""

import os

import jax
import numpy as np
import pytest
from flax import nnx

from bpd_jax.infra import checkpoints as checkpoints_lib
from bpd_jax.infra import errors
from bpd_jax.models import factory
from bpd_jax.models import RopeScaling, TransformerConfig

from train_configs import tiny_config


def save(model, workdir):
  checkpoints = checkpoints_lib.Checkpoints(str(workdir / 'checkpoints'))
  checkpoints.save(3, dict(params=nnx.state(model, nnx.Param)))
  checkpoints.wait()
  checkpoints.close()


def test_random_model_is_the_configs_seeded_model():
  config = tiny_config()
  model = factory.random_model(config, vocab_size=40)
  assert model.config == factory.model_config_from(config, 40)
  again = factory.random_model(config, vocab_size=40)
  for a, b in zip(jax.tree.leaves(nnx.state(model)),
                  jax.tree.leaves(nnx.state(again))):
    np.testing.assert_array_equal(a, b)


def devices_of(tree):
  return {device for leaf in jax.tree.leaves(tree) for device in
          leaf.devices()}


def test_a_model_split_later_is_built_in_the_hosts_memory(monkeypatch,
                                                          tmp_path):
  # On an accelerator the host is the CPU backend; here it is device 0,
  # so a simulated one stands in for it.
  host = jax.devices()[-1]
  monkeypatch.setattr(factory, 'host_device', lambda: host)
  split = tiny_config(mesh=dict(shape=(2, 4), axes=('data', 'model'),
                                param_rules='tensor'))
  with factory.build_place(split):
    model = factory.random_model(split, vocab_size=40)
  assert devices_of(nnx.state(model)) == {host}
  save(model, tmp_path)
  with factory.build_place(split):
    restored = factory.restore_model(split, str(tmp_path), vocab_size=40)
  assert devices_of(nnx.state(restored)) == {host}
  with factory.build_place(tiny_config()):  # Replicated: the default.
    model = factory.random_model(tiny_config(), vocab_size=40)
  assert devices_of(nnx.state(model)) == {jax.devices()[0]}


def test_restore_takes_every_parameter_of_the_latest_checkpoint(tmp_path):
  config = tiny_config()
  config.seed = 7  # Not restore's own initialisation (seed 0).
  trained = factory.random_model(config, vocab_size=40)
  save(trained, tmp_path)
  restored = factory.restore_model(config, str(tmp_path), vocab_size=40)
  for a, b in zip(jax.tree.leaves(nnx.state(trained, nnx.Param)),
                  jax.tree.leaves(nnx.state(restored, nnx.Param))):
    np.testing.assert_array_equal(a, b)


def test_another_architecture_is_refused(tmp_path):
  config = tiny_config()
  save(factory.random_model(config, vocab_size=40), tmp_path)
  with pytest.raises(ValueError, match='has shape'):
    factory.restore_model(config, str(tmp_path), vocab_size=41)
  with pytest.raises(FileNotFoundError, match='no checkpoint'):
    factory.restore_model(config, str(tmp_path / 'none'), vocab_size=40)


def flat(params) -> dict:
  """{path: array} of a parameter state."""
  return {jax.tree_util.keystr(path): np.asarray(value) for path, value
          in jax.tree_util.tree_leaves_with_path(params)}


def test_a_warm_start_takes_the_base_and_on_request_the_heads(tmp_path):
  config = tiny_config()
  config.seed = 7  # Not the new run's initialisation.
  trained = factory.random_model(config, vocab_size=40)
  save(trained, tmp_path)
  fresh = factory.random_model(tiny_config(), vocab_size=40)
  params = nnx.state(fresh, nnx.Param)
  theirs, new = (flat(nnx.state(m, nnx.Param)) for m in (trained, fresh))
  for heads in (False, True):
    started = flat(factory.warm_start(
        params, fresh.config, str(tmp_path), heads=heads))
    for name, value in started.items():
      from_run = "'heads'" not in name or heads
      np.testing.assert_array_equal(
          value, (theirs if from_run else new)[name], err_msg=name)
  # A run of other heads (here: another k) does not fit.
  other = factory.random_model(tiny_config(model=dict(num_proposal_heads=4)),
                               vocab_size=40)
  with pytest.raises(errors.ConfigError, match='heads/.* has shape'):
    factory.warm_start(nnx.state(other, nnx.Param), other.config,
                       str(tmp_path), heads=True)
  # An imported checkpoint has a base only: refused before it is read.
  imported = os.path.join(os.path.dirname(__file__), 'data', 'tiny_llama3')
  with pytest.raises(errors.ConfigError, match='tiny_llama3 is an imported '
                     'checkpoint, which has no proposal heads'):
    factory.warm_start(params, fresh.config, imported, heads=True)


class Ids:
  """A task vocabulary's special ids."""
  pad_id, eos_id, bos_id, stop_ids = 0, 1, 2, ()


def test_a_model_must_have_its_task_vocabularys_special_ids():
  model = factory.model_config_from(tiny_config(), 40)
  factory.check_special_ids(model, Ids())  # The project's 0, 1, 2.
  imported = Ids()
  imported.pad_id, imported.eos_id, imported.stop_ids = -1, 7, [8]
  with pytest.raises(errors.ConfigError, match=(
      r"^the model's special ids \(pad_id=0, eos_id=1, bos_id=2, "
      r"stop_ids=\(\)\) are not the task vocabulary's \(pad_id=-1, "
      r'eos_id=7, bos_id=2, stop_ids=\(8,\)\)')):
    factory.check_special_ids(model, imported)


def test_a_mixture_output_must_be_over_its_tasks_values():
  config = tiny_config()
  config.model.mixture_components = 2
  model = factory.model_config_from(config, 40)
  assert model.mixture.components == 2 and model.mixture.first_id == 3
  images = Ids()
  images.intensity_offset = 3
  factory.check_special_ids(model, images)
  images.intensity_offset = 4
  with pytest.raises(errors.ConfigError, match=(
      'model.mixture_first_id=3: .* whose first id is 4')):
    factory.check_special_ids(model, images)
  with pytest.raises(errors.ConfigError, match=(
      "this task's tokens are not ordered values: set "
      'model.mixture_components=0')):
    factory.check_special_ids(model, Ids())


ADDED_FIELDS = ('norm', 'feed_forward', 'num_kv_heads', 'head_dim',
                'qkv_bias', 'out_bias', 'ffn_bias', 'rope_theta',
                'rope_scaling')


def test_the_model_sections_defaults_are_the_papers_transformer():
  model = factory.model_config_from(tiny_config(), 40)
  paper = TransformerConfig(vocab_size=40)
  assert all(getattr(model, name) == getattr(paper, name)
             for name in ADDED_FIELDS)


def test_llama_family_fields_from_the_model_section():
  config = tiny_config()
  config.model.update(
      norm='rms', positions='rotary', feed_forward='gated', activation='silu',
      num_kv_heads=1, head_dim=8, qkv_bias=False, out_bias=False,
      ffn_bias=False, rope_theta=500_000.0,
      rope_scaling=dict(kind='llama3', factor=8.0,
                        original_max_positions=8192))
  model = factory.model_config_from(config, 40)
  assert model.rope_scaling == RopeScaling('llama3', 8.0)
  assert (model.kv_heads, model.attention_head_dim) == (1, 8)
  assert factory.random_model(config, 40).decoder_layers[0].ffn.gate
  config.model.rope_scaling = dict(kind='dynamic', factor=2.0)
  with pytest.raises(ValueError, match="kind='dynamic' is not one of"):
    factory.model_config_from(config, 40)
