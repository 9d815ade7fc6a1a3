"""Decoding with parameters and cache split over a device mesh.

The Decoder places parameters and cache by `param_rules` (here the shipped
'tensor' rules: heads, hidden units and the vocabulary over the 'model'
axis) while the batch is split over 'data', and runs the whole loop as one
program. Every decode must give the single-device decode's tokens; where
the split products are summed in another order, the only difference
allowed is a near-tie of the scoring model (as tests/test_generate.py
allows between blockwise and greedy decoding). The project's Transformer
runs in float64, where such ties are vanishingly rare; the imported tiny
Llama in float32.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bpd_jax import generate
from bpd_jax.bench import collectives
from bpd_jax.bench import near_ties
from bpd_jax.decoding import DecodeOptions, DynamicTree, Sampler, Tree
from bpd_jax.infra import ops
from bpd_jax.infra import sharding
from bpd_jax.models import Transformer, TransformerConfig, imports

import repeating_drafters

MESHES = ((1, 8), (2, 4), (8, 1))
MAX_LEN = 12
# Every kind of decode: argmax (greedy, exact blockwise, a token tree)
# and sampled (ancestral, blockwise), the sampled ones with a key.
DECODES = {
    'greedy': DecodeOptions(max_len=MAX_LEN),
    'blockwise': DecodeOptions(max_len=MAX_LEN, k=4),
    'tree': DecodeOptions(max_len=MAX_LEN, k=4,
                          tree=Tree.from_widths((2, 2), 3)),
    'dynamic tree': DecodeOptions(max_len=MAX_LEN, k=4,
                                  tree=DynamicTree(10, 3, top=3, frontier=3)),
    'sample': DecodeOptions(max_len=MAX_LEN, sampler=Sampler(0.8)),
    'blockwise sample': DecodeOptions(max_len=MAX_LEN, k=4,
                                      sampler=Sampler(0.8, top_k=20)),
    'tree sample': DecodeOptions(max_len=MAX_LEN, k=4, sampler=Sampler(0.8),
                                 tree=Tree.from_widths((2, 2), 3)),
}
ARGMAX_DECODES = ('greedy', 'blockwise', 'tree', 'dynamic tree')


def paper_model(encoder_layers: int, dtype='float64', **fields):
  """A random model of the project's own Transformer whose dimensions
  split over 8 devices (8 heads, vocabulary 64), weights scaled up for
  varied outputs."""
  config = TransformerConfig(**{
      **dict(vocab_size=64, d_model=32, d_ff=64, num_heads=8,
             num_encoder_layers=encoder_layers, num_decoder_layers=2,
             dropout_rate=0.0, max_source_len=16, max_target_len=64,
             tie_output=False, num_proposal_heads=4, head_hidden=32,
             dtype=dtype, param_dtype=dtype), **fields})
  model = Transformer(config, rngs=nnx.Rngs(3))
  graphdef, state = nnx.split(model)
  return nnx.merge(graphdef, jax.tree.map(lambda x: x * 3.0, state))


def llama_model():
  """The tiny Llama 3 checkpoint: 4 query heads over 2 key/value heads,
  tied embeddings, vocabulary 376, pad_id -1 and two stop ids."""
  return imports.load_model('tests/data/tiny_llama3', num_proposal_heads=4,
                            dtype='float32', param_dtype='float32')


# name -> (model, float64?, near-tie margin relative to the logits' scale).
MODELS = {
    'decoder-only': (lambda: paper_model(0), True, 1e-9),
    'encoder-decoder': (lambda: paper_model(2), True, 1e-9),
    'llama': (llama_model, False, near_ties.RELATIVE_TOLERANCE),
}


def inputs_for(model, batch=8, length=5) -> np.ndarray:
  """Right-padded inputs of different lengths (the model's own pad id)."""
  rng = np.random.default_rng(5)
  tokens = rng.integers(3, min(model.config.vocab_size, 300),
                        (batch, length))
  lengths = rng.integers(1, length + 1, batch)
  return np.where(np.arange(length) < lengths[:, None], tokens,
                  model.config.pad_id).astype(np.int32)


@functools.lru_cache(maxsize=None)
def case(name: str):
  """(model, inputs) of a model name."""
  build, x64, _ = MODELS[name]
  with jax.enable_x64(x64):
    model = build()
    return model, inputs_for(model)


@functools.lru_cache(maxsize=None)
def reference(name: str, kind: str):
  """The single-device decode of a model and kind (key 7)."""
  model, inputs = case(name)
  with jax.enable_x64(MODELS[name][1]):
    return generate.Decoder(model).decode(inputs, DECODES[kind], key=7)


def assert_same_or_near_tie(model, inputs, expected, actual, tie):
  """Tokens equal, or the first difference sits on a scoring near-tie."""
  expected, actual = np.asarray(expected), np.asarray(actual)
  for i in np.flatnonzero((expected != actual).any(axis=1)):
    j = int(np.argmax(expected[i] != actual[i]))
    margin = near_ties.top2_margin(model, inputs[i], expected[i, :j])
    assert margin < tie, (f'example {i} differs at token {j} with a top-2 '
                          f'margin of {margin}, not a near-tie')


def spec(array) -> P:
  return array.sharding.spec


def assert_tensor_placed(decoder, shape):
  """Parameters, and the output weights laid out for decoding, as the
  'tensor' rules put them."""
  model, layout = decoder.model, decoder.layout(4)
  layer = model.decoder_layers[0]
  kernels = {
      'qkv': (layer.attention.qkv.kernel, P(None, 'model')),
      'attention out': (layer.attention.out.kernel, P('model')),
      'ffn up': (layer.ffn.up.kernel, P(None, 'model')),
      'ffn down': (layer.ffn.down.kernel, P('model')),
      'embedding': (model.target_embed.embedding, P('model')),
      'heads in': (model.heads.w_in, P(None, None, 'model')),
      'heads out': (model.heads.w_out, P(None, 'model')),
      'norm': (layer.ffn_sublayer.norm.scale, P()),
      'layout vocabulary': (layout.vocab, P(None, 'model')),
      'layout heads in': (layout.proposals.w_in, P(None, 'model')),
      'layout heads out': (layout.proposals.w_out, P(None, 'model')),
  }
  if not model.config.tie_output:
    kernels['output'] = (model.output.kernel, P(None, 'model'))
  for name, (param, expected) in kernels.items():
    array = param if isinstance(param, jax.Array) else param[...]
    assert spec(array) == expected, name
    assert isinstance(array.sharding, NamedSharding), name
    if shape[1] > 1 and expected != P():  # 1/4 or 1/8 on each device.
      assert array.addressable_shards[0].data.size * shape[1] == array.size


def decode_and_compare(name, shape, kind):
  model, inputs = case(name)
  _, x64, tie = MODELS[name]
  mesh = sharding.make_mesh(shape, ('data', 'model'))
  with jax.enable_x64(x64):
    decoder = generate.Decoder(model, mesh=mesh, param_rules='tensor',
                               log=lambda _: None)
    assert_tensor_placed(decoder, shape)
    result = decoder.decode(inputs, DECODES[kind], key=7)
    assert result.tokens.sharding.is_equivalent_to(
        NamedSharding(mesh, P('data')), 2)
    if kind in ARGMAX_DECODES:
      # Exact decodes give greedy decoding's output, here on one device.
      assert_same_or_near_tie(model, inputs, reference(name, 'greedy').tokens,
                              result.tokens, tie)
    else:  # Sampled: the same draws as on one device.
      np.testing.assert_array_equal(result.tokens,
                                    reference(name, kind).tokens)
    assert_tensor_placed(decoder, shape)  # Still after decoding.


# The default suite's cases: every model and mesh once, every decode that
# draft or sample once (a dynamic tree slow: it is a static tree's decode
# with per-example masks, by default on one device in
# tests/test_generate.py; a tree under sampling slow: a static tree's
# decode with a sampler's acceptance, both by default here; greedy slow: the
# loop every other decode extends).
DEFAULT_CASES = (('decoder-only', (2, 4), 'tree'),
                 ('decoder-only', (8, 1), 'blockwise sample'),
                 ('encoder-decoder', (1, 8), 'blockwise'),
                 ('encoder-decoder', (2, 4), 'sample'),
                 ('llama', (2, 4), 'blockwise'))


@pytest.mark.parametrize('name,shape,kind', [
    pytest.param(name, shape, kind, marks=() if (name, shape, kind) in
                 DEFAULT_CASES else pytest.mark.slow,
                 id=f'{name}-{shape[0]}x{shape[1]}-{kind}')
    for name in MODELS for shape in MESHES for kind in DECODES])
def test_tensor_sharded_decodes_give_the_one_device_tokens(name, shape,
                                                           kind):
  decode_and_compare(name, shape, kind)


@pytest.mark.parametrize('fields', [
    dict(head_layer='autoregressive', draft_source='own'),
    dict(head_layer='block', draft_source='base'),
    pytest.param(dict(head_layer='autoregressive', draft_source='base'),
                 marks=pytest.mark.slow),
    pytest.param(dict(head_layer='sequential'), marks=pytest.mark.slow),
    pytest.param(dict(head_layer='joint'), marks=pytest.mark.slow),
], ids=lambda fields: ':'.join(fields.values()))
def test_every_head_layer_decodes_exactly_on_split_parameters(fields):
  """Heads that read each other's proposals, the draft layer with its own
  cache (split by head as the base's) and source attention, the joint
  layer: exact blockwise decoding gives the one-device greedy output."""
  mesh = sharding.make_mesh((2, 4), ('data', 'model'))
  with jax.enable_x64(True):
    model = paper_model(2, **fields)
    repeating_drafters.scale_heads(model, 0.0)
    inputs = inputs_for(model)
    greedy = generate.Decoder(model).decode(inputs, DECODES['greedy'])
    decoder = generate.Decoder(model, mesh=mesh, param_rules='tensor',
                               log=lambda _: None)
    result = decoder.decode(inputs, DECODES['blockwise'])
    assert_same_or_near_tie(model, inputs, greedy.tokens, result.tokens,
                            1e-9)
  assert float(result.mean_block_size) > 1.0


def test_rules_need_a_mesh_with_their_axis():
  model, _ = case('decoder-only')
  with pytest.raises(ValueError, match="param_rules='tensor' needs a mesh"):
    generate.Decoder(model, param_rules='tensor')
  with pytest.raises(ValueError, match="splits over a 'model' mesh axis"):
    generate.Decoder(model, mesh=sharding.make_mesh((8,), ('data',)),
                     param_rules='tensor')


def test_no_recompilation_between_calls_of_the_same_shapes():
  model, inputs = case('decoder-only')
  mesh = sharding.make_mesh((2, 4), ('data', 'model'))
  with jax.enable_x64(True):
    decoder = generate.Decoder(model, mesh=mesh, param_rules='tensor')
    decoder.decode(inputs, DECODES['tree'])
    compiled = decoder.compilations()
    # The same Decoder again, and a new one: its program is shared.
    again = generate.Decoder(model, mesh=mesh, param_rules='tensor')
    for one in (decoder, again):
      one.decode(inputs, DECODES['tree'])
    assert decoder.compilations() == compiled


def test_the_cache_is_split_by_key_value_head():
  """The loop state holds 1/8 of each layer's keys and values per device:
  the batch over 'data' (2), the heads over 'model' (4)."""
  model, inputs = case('decoder-only')
  mesh = sharding.make_mesh((2, 4), ('data', 'model'))
  with jax.enable_x64(True):
    decoder = generate.Decoder(model, mesh=mesh, param_rules='tensor')
    text = decoder.lower(inputs, DECODES['greedy']).compile().as_text()
  # [batch 8 / 2, positions, kv_heads 8 / 4, head_dim 4].
  positions = DECODES['greedy'].cache_positions(inputs.shape[1])
  loops = [line for line in text.splitlines() if ' while(' in line]
  assert any(f'f64[4,{positions},2,4]' in line for line in loops)
  assert not any(f'f64[8,{positions},8,4]' in line for line in loops)


def test_fsdp_rules_decode_too():
  """Parameters split over 'data' (decoding gathers each where used)."""
  model, inputs = case('decoder-only')
  mesh = sharding.make_mesh((8, 1), ('data', 'model'))
  with jax.enable_x64(True):
    decoder = generate.Decoder(model, mesh=mesh, param_rules='fsdp')
    ffn = decoder.model.decoder_layers[0].ffn
    assert spec(ffn.up.kernel[...]) == P(None, 'data')  # [32, 64]
    assert spec(ffn.down.kernel[...]) == P('data')  # [64, 32]
    result = decoder.decode(inputs, DECODES['blockwise'])
    assert_same_or_near_tie(model, inputs,
                            reference('decoder-only', 'greedy').tokens,
                            result.tokens, 1e-9)


@pytest.mark.parametrize('argmax', [
    ops.argmax, functools.partial(jnp.argmax, axis=-1)],
                         ids=['ops.argmax', 'jnp.argmax'])
def test_argmax_over_a_split_vocabulary_breaks_ties_as_unsplit(argmax):
  """Equal largest logits on different devices: the lowest id wins, as on
  one device (both reductions are split into a per-device reduction and
  an all-reduce over global ids)."""
  mesh = sharding.make_mesh((1, 8), ('data', 'model'))
  logits = np.zeros((4, 64), np.float32)
  logits[0, [9, 41]] = 2.0  # Devices 1 and 5.
  logits[1, [63, 8]] = 1.0  # Devices 7 and 1.
  logits[2, [7, 8]] = 5.0  # The last of device 0, the first of device 1.
  logits[3, :] = -1.0  # All equal.
  split = jax.device_put(logits, NamedSharding(mesh, P(None, 'model')))
  expected = np.argmax(logits, axis=1)
  np.testing.assert_array_equal(expected, [9, 8, 7, 0])
  np.testing.assert_array_equal(jax.jit(argmax)(split), expected)
  np.testing.assert_array_equal(argmax(logits), expected)


def test_decoded_exact_ties_give_the_one_device_tokens():
  """An output projection of two equal columns on different devices (ids
  5 and 45) and zeros elsewhere: every logit ties with another, and every
  token is the lowest id of its tie (5, or 0 where the two are negative),
  sharded as on one device."""
  with jax.enable_x64(True):
    model = paper_model(0)
    column = model.output.kernel[...][:, 5]
    kernel = jnp.zeros_like(model.output.kernel[...])
    model.output.kernel[...] = kernel.at[:, 5].set(column).at[:, 45].set(
        column)
    inputs = inputs_for(model)
    mesh = sharding.make_mesh((2, 4), ('data', 'model'))
    decoders = (generate.Decoder(model),
                generate.Decoder(model, mesh=mesh, param_rules='tensor'))
    for options in (DECODES['greedy'], DECODES['blockwise']):
      one, split = (np.asarray(d.decode(inputs, options).tokens)
                    for d in decoders)
      np.testing.assert_array_equal(split, one)
      assert set(np.unique(one)) <= {0, 5} and (one == 5).any()


@pytest.mark.parametrize('head_layer', ['independent', 'joint'])
def test_a_blockwise_iteration_adds_only_the_heads_collectives(head_layer):
  # Greedy: an all-reduce per sublayer and one for the embedding lookup,
  # two for the argmax over the split vocabulary. Blockwise adds the sum of
  # the heads' split hidden units and the argmax of their proposals (two):
  # proposals are made at the accepted position, which the base's argmax
  # decides first. The independent heads' input columns, interleaved by
  # hidden unit, keep each device on the units its slice of w_out holds:
  # no all-gather between the two.
  model = paper_model(0, dtype='float32', head_layer=head_layer)
  inputs = inputs_for(model)
  mesh = sharding.make_mesh((2, 4), ('data', 'model'))
  decoder = generate.Decoder(model, mesh=mesh, param_rules='tensor',
                             log=lambda _: None)
  counts = {name: collectives.per_iteration(decoder.lower(
      inputs, DecodeOptions(max_len=MAX_LEN, k=k)).compile().as_text())
            for name, k in (('greedy', 1), ('blockwise', 4))}
  assert set(counts['blockwise'].counts) == {'all-reduce'}
  assert counts['blockwise'].count == counts['greedy'].count + 3

