"""Per-device bytes of a model's parameters, its optimizer state and its
decoding cache as a rule set lays them out over a mesh.

Computed from shapes and shardings (`jax.eval_shape`, the rules'
NamedShardings), nothing allocated: what each device would hold. The
parameters are laid out as a Decoder and training place them
(`sharding.param_shardings`); the optimizer state is that of the run's
last phase (the one that trains the heads: a 'heads' phase, or a lone
'base' phase training everything), laid out as training lays it out
(`training.step.TrainStates`: the moments like the parameters they
follow); the cache as a sharded Decoder's program constrains it
(`sharding.cache_shardings`: the batch over the data axis, and 'tensor'
by key/value head).
"""

import collections
import math

import jax
import jax.numpy as jnp
from flax import nnx

from bpd_jax import decoding
from bpd_jax.infra import sharding
from bpd_jax.models import drafters
from bpd_jax.training import phases as phases_lib
from bpd_jax.training import step as step_lib


def held_bytes(tree, shardings) -> dict:
  """{device: bytes of `tree`'s arrays it would hold}, each array laid out
  by its sharding (a replicated array counts whole on every device).

  Args:
    tree: arrays or `jax.ShapeDtypeStruct`s.
    shardings: a `jax.sharding.Sharding` per array of `tree`, in a tree
      of the same structure.
  """
  leaves, treedef = jax.tree.flatten(tree)
  held = collections.Counter()
  for leaf, placed in zip(leaves, treedef.flatten_up_to(shardings)):
    itemsize = jnp.dtype(leaf.dtype).itemsize
    for device, index in placed.devices_indices_map(leaf.shape).items():
      held[device] += itemsize * math.prod(
          len(range(*part.indices(size)))
          for part, size in zip(index, leaf.shape))
  return dict(held)


def per_device(model, train_config, mesh, rules, *, batch_axis: str,
               inputs_shape: tuple[int, int],
               options: decoding.DecodeOptions) -> dict[str, int]:
  """The most any device holds of each part, in bytes.

  Args:
    model: the Transformer.
    train_config: the config's `train` section (the phases and their
      optimizer).
    mesh: the mesh.
    rules: () (replicated), 'tensor', 'fsdp' or (regex, spec) pairs.
    batch_axis: the mesh axis the batch (and the cache's rows) split on.
    inputs_shape: [batch, length] of the decode's inputs (the source of
      an encoder-decoder, the prompt of a decoder-only model).
    options: the decode's options (the cache holds their positions).

  Returns:
    {'params': ..., 'optimizer': ..., 'cache': ...}; the optimizer's
    phase is `train_phase(train_config, model)`.
  """
  quiet = lambda _: None  # The Decoder says what the rules replicate.
  params = nnx.state(model)
  drafter_rules = drafters.tensor_rules(model.config.head_layer)
  param_shardings = sharding.param_shardings(params, mesh, rules, quiet,
                                             drafter_rules)
  phase = train_phase(train_config, model)
  states = step_lib.TrainStates([phase], train_config, params,
                                param_shardings, mesh)
  state_shardings, abstract = states.shardings(phase)
  cache = _abstract_cache(model, inputs_shape, options)
  parts = dict(
      params=held_bytes(params, param_shardings),
      optimizer=held_bytes(abstract['opt_state'],
                           state_shardings['opt_state']),
      cache=held_bytes(cache, sharding.cache_shardings(
          cache, mesh, rules, batch_axis, quiet, drafter_rules)))
  return {name: max(held.values(), default=0)
          for name, held in parts.items()}


def _abstract_cache(model, inputs_shape, options):
  """The shapes of the cache a decode of `options` starts with, as
  `generate.Decoder` makes it (an encoder-decoder's source cut at
  max_source_len, its prompt the start token)."""
  batch, length = inputs_shape
  config = model.config
  if config.is_encoder_decoder:
    source = jax.ShapeDtypeStruct((batch, min(length, config.max_source_len)),
                                  jnp.int32)
    length = 1
  else:
    source = None
  positions = options.cache_positions(length)
  return jax.eval_shape(
      lambda source: model.init_cache(batch, positions, source), source)


def train_phase(train_config, model) -> phases_lib.Phase:
  """The phase whose optimizer state is counted: the run's last, which
  trains the heads."""
  return phases_lib.plan_phases(train_config, model.config)[-1]
