"""Per-device bytes of parameters, optimizer state and decoding cache by
rule set, from shapes and shardings (8 simulated CPU devices)."""

import jax
import pytest
from flax import nnx

from bpd_jax import generate
from bpd_jax.bench import sharded_memory
from bpd_jax.decoding import DecodeOptions
from bpd_jax.infra import sharding
from bpd_jax.models import Transformer, TransformerConfig
from bpd_jax.models import drafters
from train_configs import tiny_config

OPTIONS = DecodeOptions(max_len=12, k=4)
INPUTS = (8, 5)  # [batch, prompt length].


def small_model():
  """A decoder-only Transformer whose heads (8), hidden units and
  vocabulary split over 8 devices, with enough parameters in them that
  the whole norms and biases weigh little."""
  return Transformer(TransformerConfig(
      vocab_size=512, d_model=64, d_ff=256, num_heads=8,
      num_encoder_layers=0, num_decoder_layers=2, tie_output=False,
      num_proposal_heads=4, head_hidden=64, max_target_len=64),
                     rngs=nnx.Rngs(0))


def per_device(model, shape, rules, freeze_base=True):
  train = tiny_config(train=dict(freeze_base=freeze_base)).train
  return sharded_memory.per_device(
      model, train, sharding.make_mesh(shape, ('data', 'model')), rules,
      batch_axis='data', inputs_shape=INPUTS, options=OPTIONS)


@pytest.mark.parametrize('shape', [(1, 8), (2, 4)])
def test_rule_sets_divide_the_bytes_by_their_axis(shape):
  """'tensor' holds 1/model-axis of the replicated parameters (within 10%:
  norms and the biases added after an all-reduce stay whole) and of their
  optimizer moments, and 1/model-axis of the cache (split by key/value
  head beside the batch's split); 'fsdp' 1/data-axis of parameters and
  moments, the cache as replicated."""
  data, model_axis = shape
  model = small_model()
  replicated = per_device(model, shape, ())
  tensor = per_device(model, shape, 'tensor')
  fsdp = per_device(model, shape, 'fsdp')
  whole = sum(x.nbytes for x in jax.tree.leaves(nnx.state(model)))
  assert replicated['params'] == whole
  for part in ('params', 'optimizer'):
    assert tensor[part] == pytest.approx(replicated[part] / model_axis,
                                         rel=0.1)
    assert fsdp[part] == pytest.approx(replicated[part] / data, rel=0.1)
  assert tensor['cache'] * model_axis == replicated['cache']
  assert fsdp['cache'] == replicated['cache']
  # The cache of 8 rows, 12 + 4 positions after the prompt's 5, 2 layers
  # of keys and values, [8 heads, 8 dims] float32, over the data axis.
  positions = OPTIONS.cache_positions(INPUTS[1])
  assert replicated['cache'] * data == 8 * positions * 2 * 2 * 64 * 4


def test_the_optimizer_state_is_the_heads_phase():
  """On a frozen base the moments are the heads' (two a parameter, Adam);
  fine-tuning the base, the whole model's."""
  model = small_model()
  heads = sum(x.nbytes for x in jax.tree.leaves(
      nnx.state(model.heads, nnx.Param)))
  whole = sum(x.nbytes for x in jax.tree.leaves(nnx.state(model)))
  frozen = per_device(model, (1, 8), ())['optimizer']
  assert 2 * heads <= frozen < 2 * heads + 64  # And step counts.
  tuned = per_device(model, (1, 8), (), freeze_base=False)['optimizer']
  assert 2 * whole <= tuned < 2 * whole + 64


@pytest.mark.parametrize('rules', ['tensor', 'fsdp'])
def test_held_bytes_are_those_of_the_decoders_placed_parameters(rules):
  """What the shapes and shardings say a device holds is what a sharded
  Decoder's parameters hold there, device by device."""
  model = small_model()
  mesh = sharding.make_mesh((2, 4), ('data', 'model'))
  decoder = generate.Decoder(model, mesh=mesh, param_rules=rules,
                             log=lambda _: None)
  placed = sharding.device_bytes(nnx.state(decoder.model))
  params = nnx.state(model)
  expected = sharded_memory.held_bytes(params, sharding.param_shardings(
      params, mesh, rules, log=lambda _: None,
      model_rules=drafters.tensor_rules(model.config.head_layer)))
  assert placed == expected
  assert max(placed.values()) == per_device(model, (2, 4), rules)['params']
