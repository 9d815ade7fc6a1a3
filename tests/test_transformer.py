"""Transformer: cached decoding equals the full forward pass; config checks."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bpd_jax.infra import ops
from bpd_jax.models import ImagePositions, Transformer, TransformerConfig
from bpd_jax.models import norms
from bpd_jax.models import RopeScaling
from bpd_jax.models.transformer import embedding_rows

import llama_like

@nnx.jit
def extend(model, cache, tokens, start):
  return model.extend(cache, tokens, start)


TINY = dict(vocab_size=11, d_model=16, d_ff=32, num_heads=2,
            num_encoder_layers=2, num_decoder_layers=2, dropout_rate=0.1,
            max_source_len=12, max_target_len=24, num_proposal_heads=3)


def extend_in_chunks(model, source, tokens, starts, chunk):
  """Decodes `tokens` through the cache; returns the outputs it produced.

  Every example i starts at its own offset starts[i]: positions before it
  are filled by a first call whose entries past starts[i] are garbage, and
  every chunk is first written with garbage (a rejected proposal block) and
  then rewritten with the true tokens at the same offset.
  """
  batch, length = tokens.shape
  rng = np.random.default_rng(0)
  garbage = jnp.asarray(rng.integers(3, model.config.vocab_size, tokens.shape),
                        jnp.int32)
  starts = jnp.asarray(starts, jnp.int32)
  cache = model.init_cache(batch, length + chunk, source)
  before_start = jnp.arange(length)[None, :] < starts[:, None]
  out, cache = extend(model, cache, jnp.where(before_start, tokens, garbage),
                      jnp.zeros_like(starts))
  outputs = jnp.zeros((batch, length + chunk, out.shape[-1]), out.dtype)
  outputs = outputs.at[:, :length].set(jnp.where(before_start[..., None], out,
                                                 0.0))
  take = jax.vmap(lambda row, s: jax.lax.dynamic_slice_in_dim(row, s, chunk))
  pad = lambda a: jnp.pad(a, ((0, 0), (0, chunk)))
  position = starts
  while int(position.min()) < length:
    _, cache = extend(model, cache, take(pad(garbage), position),
                      position)  # A rejected block.
    out, cache = extend(model, cache, take(pad(tokens), position), position)
    outputs = ops.write_at(outputs, out, position)
    position = position + chunk
  return outputs[:, :length]


def _extend_cases():
  """Every position encoding in both architectures: by default local
  attention in encoder-decoders (super-resolution) and full attention in
  decoder-only models, and the paper's sinusoidal encoder-decoder; the
  rest of the grid slow."""
  for encoder_layers in (2, 0):
    for pre_norm, positions in ((True, 'sinusoidal'), (False, 'learned'),
                                (True, 'image')):
      for local_block, local_memory in ((0, 0), (3, 2)):
        case = (encoder_layers, pre_norm, positions, local_block,
                local_memory)
        default = ((encoder_layers == 2) == (local_block > 0)
                   or (encoder_layers, positions) == (2, 'sinusoidal'))
        yield case if default else pytest.param(*case,
                                                marks=pytest.mark.slow)


@pytest.mark.parametrize(
    'encoder_layers,pre_norm,positions,local_block,local_memory',
    list(_extend_cases()))
def test_cached_extend_equals_full_forward(encoder_layers, pre_norm,
                                           positions, local_block,
                                           local_memory):
  with jax.enable_x64(True):
    config = TransformerConfig(**{
        **TINY, 'num_encoder_layers': encoder_layers, 'pre_norm': pre_norm,
        'positions': positions, 'dtype': 'float64',
        'param_dtype': 'float64', 'local_attention_block': local_block,
        'local_attention_memory': local_memory,
        'image': ImagePositions(
            source_side=1, target_side=2,
            source_skip=encoder_layers > 0,
            source_window=3 if encoder_layers else 0)
        if positions == 'image' else None})
    model = Transformer(config, rngs=nnx.Rngs(3))
    rng = np.random.default_rng(1)
    source = None
    if encoder_layers:
      source = jnp.asarray([[5, 6, 7, 8, 1, 0], [4, 9, 1, 0, 0, 0]])
    tokens = jnp.asarray(rng.integers(3, config.vocab_size, (2, 10)),
                         jnp.int32)
    full = model(source, tokens)
    for chunk in (1, 3):
      cached = extend_in_chunks(model, source, tokens, [1, 4], chunk)
      np.testing.assert_allclose(cached, full, rtol=1e-9, atol=1e-9)


def test_float32_cache_matches_to_float_precision():
  model = Transformer(TransformerConfig(**TINY), rngs=nnx.Rngs(0))
  source = jnp.asarray([[5, 6, 7, 1]])
  tokens = jnp.asarray([[2, 5, 9, 4, 4, 8]])
  full = model(source, tokens)
  cached = extend_in_chunks(model, source, tokens, [2], 2)
  np.testing.assert_allclose(cached, full, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('architecture,encoder_layers,dtype', [
    ('llama', 0, 'float64'), ('qwen2', 0, 'float64'), ('llama', 2, 'float64'),
    ('llama', 0, 'float32'), ('llama', 0, 'bfloat16'),
    # Qwen2's biases in lower precisions: slow.
    pytest.param('qwen2', 0, 'float32', marks=pytest.mark.slow),
    pytest.param('qwen2', 0, 'bfloat16', marks=pytest.mark.slow)])
def test_llama_family_cached_extend_equals_full_forward(
    architecture, encoder_layers, dtype):
  """Rotary positions at each example's own offset (examples starting at
  positions 1 and 4, blocks of 1 and 3 after rejected ones), grouped-query
  attention with a cache of the key/value heads, RMSNorm and the gated
  feed-forward layer; the encoder-decoder too. bfloat16 computes in its
  own dtype both ways: equal to a few of its roundings."""
  with jax.enable_x64(dtype == 'float64'):
    config = TransformerConfig(**{
        **TINY, 'num_encoder_layers': encoder_layers, 'dtype': dtype,
        'param_dtype': dtype, **llama_like.ARCHITECTURES[architecture]})
    model = Transformer(config, rngs=nnx.Rngs(3))
    source = None
    if encoder_layers:
      source = jnp.asarray([[5, 6, 7, 8, 1, 0], [4, 9, 1, 0, 0, 0]])
    tokens = jnp.asarray(np.random.default_rng(1).integers(
        3, config.vocab_size, (2, 10)), jnp.int32)
    full = np.asarray(model(source, tokens).astype(jnp.float32))
    tolerance = dict(float64=1e-9, float32=1e-5,
                     bfloat16=8 * 2**-8 * np.abs(full).max())[dtype]
    for chunk in (1, 3):
      cached = extend_in_chunks(model, source, tokens, [1, 4], chunk)
      assert cached.dtype == jnp.dtype(dtype)
      np.testing.assert_allclose(np.asarray(cached.astype(jnp.float32)),
                                 full, rtol=0, atol=tolerance)


def test_llama_pieces_are_in_every_layer():
  config = TransformerConfig(**{**TINY, **llama_like.LLAMA,
                                'tie_output': False})
  model = Transformer(config, rngs=nnx.Rngs(0))
  params = nnx.to_flat_state(nnx.state(model, nnx.Param))
  names = ['/'.join(map(str, path)) for path, _ in params]
  assert not [name for name in names if name.endswith('bias')
              and not name.startswith('heads')]
  layers = [*model.encoder_layers, *model.decoder_layers]
  norm_layers = [model.decoder_norm, model.encoder_norm] + [
      sublayer.norm for layer in layers
      for sublayer in (layer.attention_sublayer, layer.ffn_sublayer)]
  assert all(isinstance(norm, norms.RMSNorm) and norm.epsilon == 1e-5
             for norm in norm_layers)
  assert all(hasattr(layer.ffn, 'gate') for layer in layers)
  attention = model.decoder_layers[0].attention
  assert attention.qkv.kernel.shape == (16, (4 + 2 * 2) * 8)
  assert attention.out.kernel.shape == (4 * 8, 16)
  cache = model.init_cache(2, 5, jnp.asarray([[4, 5, 1], [4, 1, 0]]))
  assert cache.self_attention[0].key.shape == (2, 5, 2, 8)
  assert cache.memory[0].key.shape == (2, 3, 2, 8)
  # Rotary positions add nothing to the inputs.
  tokens = jnp.asarray([[5, 6, 7]])
  np.testing.assert_array_equal(
      model._embed(tokens, jnp.arange(3)[None], False, None),  # pylint: disable=protected-access
      model.target_embed(tokens))
  qwen2 = Transformer(TransformerConfig(**{**TINY, **llama_like.QWEN2}),
                      rngs=nnx.Rngs(0))
  layer = qwen2.decoder_layers[0]
  assert layer.attention.qkv.bias is not None
  assert layer.attention.out.bias is None and layer.ffn.up.bias is None


def test_bfloat16_computes_in_bfloat16_with_float32_logits():
  config = TransformerConfig(**{
      **TINY, **llama_like.LLAMA, 'num_encoder_layers': 0,
      'dtype': 'bfloat16', 'param_dtype': 'bfloat16', 'tie_output': False,
      'head_layer': 'sequential'})
  model = Transformer(config, rngs=nnx.Rngs(0))
  assert {leaf.dtype for leaf in jax.tree.leaves(
      nnx.state(model, nnx.Param))} == {jnp.dtype(jnp.bfloat16)}
  tokens = jnp.asarray([[5, 6, 7, 8]])
  hidden = model(None, tokens)
  assert hidden.dtype == jnp.bfloat16
  cache = model.init_cache(1, 6)
  features, cache = extend(model, cache, tokens, jnp.zeros(1, jnp.int32))
  assert cache.self_attention[0].key.dtype == jnp.bfloat16
  weights = model.decoding_weights(3)
  assert model.logits(hidden).dtype == jnp.float32
  logits = model.next_token_logits(features, weights)
  assert logits.dtype == jnp.float32
  # The float32 product of the bfloat16 operands, not a bfloat16 rounding.
  expected = (features.astype(jnp.float32)
              @ weights.vocab.astype(jnp.float32))
  np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)
  _, draft_logits, _ = model.draft(
      cache, features, jnp.roll(tokens, -1, 1), jnp.zeros(1, jnp.int32),
      jnp.asarray([3]), lambda _, l: jnp.argmax(l, -1), 3, weights)
  assert draft_logits.dtype == jnp.float32


def test_dropout_only_in_training():
  model = Transformer(TransformerConfig(**TINY), rngs=nnx.Rngs(0))
  source = jnp.asarray([[5, 6, 7, 1]])
  tokens = jnp.asarray([[2, 5, 9, 4]])
  np.testing.assert_array_equal(model(source, tokens), model(source, tokens))
  dropped = model(source, tokens, dropout_rngs=nnx.Rngs(dropout=0))
  assert not np.allclose(dropped, model(source, tokens))
  # The same randomness gives the same dropout: a step is reproducible.
  np.testing.assert_array_equal(
      dropped, model(source, tokens, dropout_rngs=nnx.Rngs(dropout=0)))


def test_source_padding_is_ignored():
  model = Transformer(TransformerConfig(**TINY), rngs=nnx.Rngs(0))
  tokens = jnp.asarray([[2, 5, 9]])
  short = model(jnp.asarray([[5, 6, 1]]), tokens)
  padded = model(jnp.asarray([[5, 6, 1, 0, 0]]), tokens)
  np.testing.assert_allclose(short, padded, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('architecture', ['paper', 'llama'])
def test_source_padding_of_minus_one_is_ignored(architecture):
  # No vocabulary id pads (pad_id=-1): -1 reads embedding row 0 (not the
  # last row, as a lookup would wrap it), and the encoder masks it; every
  # id, 0 included, is a token.
  model = Transformer(TransformerConfig(**{
      **TINY, **llama_like.ARCHITECTURES[architecture], 'pad_id': -1}),
                      rngs=nnx.Rngs(0))
  np.testing.assert_array_equal(embedding_rows(jnp.array([-1, 0, 10])),
                                [0, 0, 10])
  tokens = jnp.asarray([[2, 0, 9]])
  short = model(jnp.asarray([[5, 0, 1]]), tokens)
  padded = model(jnp.asarray([[5, 0, 1, -1, -1]]), tokens)
  np.testing.assert_allclose(short, padded, rtol=1e-5, atol=1e-6)
  assert not np.allclose(short, model(jnp.asarray([[5, 0, 1, 0, 0]]), tokens))


def test_shared_and_tied_embeddings_are_single_tables():
  model = Transformer(TransformerConfig(**TINY), rngs=nnx.Rngs(0))
  assert not hasattr(model, 'source_embed') and not hasattr(model, 'output')
  untied = Transformer(TransformerConfig(**TINY, share_embeddings=False,
                                         tie_output=False), rngs=nnx.Rngs(0))
  assert hasattr(untied, 'source_embed') and hasattr(untied, 'output')


def test_paper_sizes():
  config = TransformerConfig.from_size('base', vocab_size=32000)
  assert (config.d_model, config.d_ff, config.num_heads) == (512, 2048, 8)
  assert (config.num_encoder_layers, config.num_decoder_layers) == (6, 6)
  model = nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0)))
  params = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
  # Transformer base with a shared 32k vocabulary: ~60M parameters.
  assert 55e6 < params < 65e6, params
  big = TransformerConfig.from_size('big', vocab_size=32000)
  assert (big.d_model, big.d_ff, big.num_heads) == (1024, 4096, 16)


@pytest.mark.parametrize('field,value,message', [
    ('vocab_size', 0, 'vocab_size=0 must be an integer >= 1'),
    ('num_heads', 3, 'd_model=16 must be divisible by num_heads=3'),
    ('dropout_rate', 1.0, r'dropout_rate=1.0 must be a finite number in '
     r'\[0, 1\)'),
    ('dropout_rate', float('nan'), r'dropout_rate=nan must be a finite'),
    ('d_model', True, 'd_model=True must be an integer >= 1'),
    ('positions', 'alibi', "positions='alibi' is not one of"),
    ('head_layer', 'shared', "head_layer='shared' is not one of"),
    ('num_proposal_heads', 0, 'num_proposal_heads=0 must be'),
    ('eos_id', 11, r'eos_id=11 is outside the vocabulary \[0, 11\)'),
    ('num_encoder_layers', -1, 'num_encoder_layers=-1 must be an integer '
     '>= 0'),
    ('dtype', 'float8', "dtype='float8'"),
    ('local_attention_block', -1, 'local_attention_block=-1 must be an '
     'integer >= 0'),
    ('local_attention_memory', 4, 'local_attention_memory=4 needs local '
     'attention'),
    ('positions', 'image', "positions='image' needs image"),
    ('image', ImagePositions(target_side=2), "image needs positions='image'"),
    ('activation', 'swish', r"activation='swish' is not one of \('relu', "
     r"'gelu', 'silu'\)"),
    ('layer_norm_epsilon', 0.0, 'layer_norm_epsilon=0.0 must be a finite '
     'number > 0'),
    ('layer_norm_epsilon', '1e-5', "layer_norm_epsilon='1e-5' must be a "
     'finite number > 0'),
    ('layer_norm_epsilon', float('inf'), 'layer_norm_epsilon=inf must be a '
     'finite number > 0'),
    ('head_hidden', True, 'head_hidden=True must be an integer >= 1'),
    ('draft_source', 'memory', "draft_source='memory' is not one of"),
    ('draft_source', 'base', "draft_source='base': head_layer='independent' "
     "reads no source"),
    ('draft_feature_layers', (1,), r'draft_feature_layers=\(1,\) must be '
     r'distinct ascending decoder layers below the top one, in \[0, 0\]'),
    ('draft_feature_layers', (0,), r"draft_feature_layers=\(0,\) are read "
     "by the draft layer and the block drafter; head_layer='independent'"),
    ('head_layer', 'medusa', r"head_layer='medusa' is not one of \("
     r"'independent', 'joint', 'sequential', 'autoregressive', 'block', "
     r"'block_corrected'\)"),
    ('block_layers', 0, 'block_layers=0 must be an integer >= 1'),
    ('block_layers', 1_000_000, r'block_layers=1000000 must be at most 64: '
     r'a drafter is a few layers'),
    ('correction_recurrent', True, "correction_recurrent=True is the "
     "corrected block drafter's correction; head_layer='independent'"),
    ('correction_recurrent', 1, 'correction_recurrent=1 must be'),
    ('norm', 'batch', r"norm='batch' is not one of \('layer', 'rms'\)"),
    ('feed_forward', 'glu', r"feed_forward='glu' is not one of "
     r"\('plain', 'gated'\)"),
    ('num_kv_heads', 3, 'num_kv_heads=3 must be an integer >= 1 dividing '
     'num_heads=2'),
    ('num_kv_heads', 0, 'num_kv_heads=0 must be an integer >= 1'),
    ('head_dim', 0, 'head_dim=0 must be an integer >= 1'),
    ('head_dim', 2.0, 'head_dim=2.0 must be an integer >= 1'),
    ('qkv_bias', 1, 'qkv_bias=1 must be a bool'),
    ('ffn_bias', None, 'ffn_bias=None must be a bool'),
    ('rope_theta', 0.0, 'rope_theta=0.0 must be a finite number > 0'),
    ('rope_scaling', RopeScaling('linear', 2.0), "rope_scaling stretches "
     "rotary positions; positions='sinusoidal'"),
    ('rope_scaling', dict(kind='linear', factor=2.0), 'rope_scaling=.* must '
     'be None or a rotary.RopeScaling'),
    ('pad_id', -2, r'pad_id=-2 must be a vocabulary id in \[0, 11\) or -1'),
    ('pad_id', 11, r'pad_id=11 must be a vocabulary id in \[0, 11\) or -1'),
    ('stop_ids', (11,), r'stop_ids=\(11,\) must be vocabulary ids in '
     r'\[0, 11\)'),
    ('stop_ids', (-1,), r'stop_ids=\(-1,\) must be vocabulary ids'),
    ('stop_ids', (5, 5), r'stop_ids=\(5, 5\) must be distinct'),
    ('stop_ids', (0,), r'stop_ids=\(0,\) must not hold pad_id=0'),
    ('stop_ids', (1,), r'stop_ids=\(1,\) must not repeat eos_id=1'),
    ('stop_ids', 5, 'stop_ids=5 must be vocabulary ids'),
])
def test_config_errors_name_value_and_limit(field, value, message):
  with pytest.raises(ValueError, match=message):
    TransformerConfig(**{**TINY, field: value})


@pytest.mark.parametrize('fields,message', [
    (dict(head_layer='block', draft_source='own'), "draft_source='own': "
     r"head_layer='block' reads the source through one of \('none', "
     r"'base'\)"),
    (dict(head_layer='block', draft_source='base', num_encoder_layers=0),
     "draft_source='base': a decoder-only model"),
    (dict(head_layer='block', num_heads=3, head_dim=3), "the block "
     "drafter's attention has rotary positions: head_dim=3 must be even"),
    (dict(head_layer='sequential', head1_from_base=False),
     "head_layer='sequential' starts from the base model's own next token"),
])
def test_drafter_config_errors(fields, message):
  with pytest.raises(ValueError, match=message):
    TransformerConfig(**{**TINY, **fields})


def test_pad_id_minus_one_and_stop_ids_are_accepted():
  config = TransformerConfig(**{**TINY, 'pad_id': -1, 'stop_ids': [0, 5]})
  assert (config.pad_id, config.stop_ids) == (-1, (0, 5))


def test_heads_of_their_own_width_and_rotary_pairs():
  config = TransformerConfig(**{**TINY, 'num_heads': 3, 'head_dim': 4})
  assert (config.kv_heads, config.attention_head_dim) == (3, 4)
  with pytest.raises(ValueError, match="positions='rotary' rotates pairs "
                     "of a head's features: head_dim=3 must be even"):
    TransformerConfig(**{**TINY, 'positions': 'rotary', 'head_dim': 3})


def test_architecture_defaults_are_the_papers():
  config = TransformerConfig(**TINY)
  assert config.activation == 'relu'
  assert config.layer_norm_epsilon == 1e-6
  assert config.scale_embeddings and config.embedding_scale == 4.0  # sqrt(16)


def test_activation_of_the_feed_forward_layers():
  x = jax.random.normal(jax.random.key(1), (2, 3, TINY['d_model']))
  outputs = {}
  for activation, f in [('relu', jax.nn.relu),
                        ('gelu', lambda h: jax.nn.gelu(h, approximate=True))]:
    model = Transformer(TransformerConfig(**TINY, activation=activation),
                        rngs=nnx.Rngs(0))  # The same weights for both.
    ffn = model.decoder_layers[0].ffn
    outputs[activation] = ffn(x, None)
    np.testing.assert_allclose(outputs[activation],
                               ffn.down(f(ffn.up(x))), rtol=1e-6, atol=1e-6)
  assert not np.allclose(outputs['relu'], outputs['gelu'], atol=1e-3)


def test_layer_norm_epsilon_reaches_every_norm():
  model = Transformer(TransformerConfig(**TINY, layer_norm_epsilon=1e-5),
                      rngs=nnx.Rngs(0))
  norms = [model.decoder_norm, model.encoder_norm] + [
      sublayer.norm for layer in [*model.encoder_layers,
                                  *model.decoder_layers]
      for sublayer in (layer.attention_sublayer, layer.ffn_sublayer)]
  assert {norm.epsilon for norm in norms} == {1e-5}


@pytest.mark.parametrize('scale', [True, False])
def test_scale_embeddings_applies_wherever_tokens_are_embedded(scale):
  config = TransformerConfig(**{**TINY, 'num_encoder_layers': 0},
                             positions='learned', scale_embeddings=scale,
                             head_layer='sequential')
  model = Transformer(config, rngs=nnx.Rngs(0))
  tokens = jnp.asarray([[5, 6, 7]])
  positions = jnp.arange(3)[None]
  table = model.target_embed.embedding[...]
  factor = 4.0 if scale else 1.0
  np.testing.assert_allclose(model.token_embedding(tokens),
                             table[tokens] * factor, rtol=1e-6)
  # The decoder's input: the same token embedding, plus positions.
  decoder_input = model._embed(  # pylint: disable=protected-access
      tokens, positions, False, None)
  np.testing.assert_allclose(
      decoder_input,
      model.token_embedding(tokens) + model.target_positions(positions),
      rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(model.decoding_weights(3).embed, table * factor,
                             rtol=1e-6)


def test_sequential_heads_need_head1_from_base():
  with pytest.raises(ValueError, match="head_layer='sequential' starts from "
                     "the base model's own next token"):
    TransformerConfig(**TINY, head_layer='sequential', head1_from_base=False)


def test_unknown_size():
  with pytest.raises(ValueError, match="unknown model size 'huge'"):
    TransformerConfig.from_size('huge', vocab_size=10)


def test_source_required_exactly_for_encoder_decoder():
  model = Transformer(TransformerConfig(**TINY), rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match='needs a source'):
    model(None, jnp.asarray([[2]]))
  decoder_only = Transformer(
      TransformerConfig(**{**TINY, 'num_encoder_layers': 0}),
      rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match='takes no source'):
    decoder_only(jnp.asarray([[2]]), jnp.asarray([[2]]))


@pytest.mark.parametrize('tie_output', [True, False])
@pytest.mark.parametrize('head1_from_base', [True, False])
@pytest.mark.parametrize('head_layer', ['independent', 'joint'])
def test_decoding_weights_give_the_head_logits(tie_output, head1_from_base,
                                               head_layer):
  model = Transformer(TransformerConfig(
      **TINY, tie_output=tie_output, head1_from_base=head1_from_base,
      head_layer=head_layer), rngs=nnx.Rngs(0))
  hidden = jax.random.normal(jax.random.key(1), (2, 4, TINY['d_model']))
  weights = model.decoding_weights(3)
  assert weights.vocab.shape == (TINY['d_model'], TINY['vocab_size'])
  np.testing.assert_allclose(model.next_token_logits(hidden, weights),
                             model.head_logits(hidden, 0, 1)[..., 0, :],
                             rtol=1e-5, atol=1e-5)
  # Heads 2..k after each example's last accepted position.
  cache = model.init_cache(2, 8, jnp.ones((2, 3), jnp.int32))
  last = jnp.array([1, 3])
  call = (cache, hidden, jnp.zeros((2, 4), jnp.int32), jnp.zeros((2,),
                                                                  jnp.int32),
          last)
  at_last = ops.take_at(model.head_logits(hidden, 1, 2), last)
  np.testing.assert_allclose(model.proposal_logits(*call, 3, weights)[0],
                             at_last, rtol=1e-5, atol=1e-5)
  # Without weights the methods lay them out themselves.
  np.testing.assert_allclose(model.proposal_logits(*call, 2)[0],
                             at_last[:, :1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('head_layer,tie_output,scale_embeddings,drafter', [
    ('sequential', True, True, {}), ('sequential', False, True, {}),
    # Unscaled embeddings: by default on the Llama-family bases below.
    pytest.param('sequential', True, False, {}, marks=pytest.mark.slow),
    ('autoregressive', True, True, {}),
    # An untied output: by default with the draft layer's own source.
    pytest.param('autoregressive', False, True, {}, marks=pytest.mark.slow),
    ('autoregressive', True, True, dict(draft_source='base')),
    ('autoregressive', False, True, dict(draft_source='own')),
    # A lower layer's features: by default with the own source.
    pytest.param('autoregressive', True, True,
                 dict(draft_feature_layers=(0,)), marks=pytest.mark.slow),
    ('autoregressive', True, True, dict(draft_source='own',
                                        draft_feature_layers=(0,))),
    # On Llama-family bases (their scale_embeddings=False wins): the draft
    # layer reading the source through a base's grouped keys and values
    # (sequential heads on a Llama base slow: by default in
    # tests/test_generate.py's head-layer cases).
    pytest.param('sequential', False, True, llama_like.LLAMA,
                 marks=pytest.mark.slow),
    ('autoregressive', True, True, dict(**llama_like.QWEN2,
                                        draft_source='base')),
    # The block drafter with its correction: one pass, then a step a head.
    ('block_corrected', True, True, {}),
    ('block_corrected', False, True, dict(draft_source='base',
                                          draft_feature_layers=(0,))),
    pytest.param('block_corrected', True, True,
                 dict(**llama_like.LLAMA, block_layers=2),
                 marks=pytest.mark.slow)])
def test_a_draft_is_the_teacher_forced_heads_on_its_own_tokens(
    head_layer, tie_output, scale_embeddings, drafter):
  """A draft made head after head through the cache equals the
  training-time heads (no cache) fed the draft's own tokens; each head
  reads the token chosen before it, and a draft layer's stale entries
  (past the last accepted position, or from an earlier draft) are unread.
  So too for the draft layer that reads the source or a lower layer."""
  model = Transformer(TransformerConfig(**{
      **TINY, 'num_proposal_heads': 4, 'dropout_rate': 0.0,
      'tie_output': tie_output, 'head_layer': head_layer,
      'scale_embeddings': scale_embeddings, **drafter}), rngs=nnx.Rngs(0))
  vocab = TINY['vocab_size']
  rng = np.random.default_rng(0)
  source = jnp.asarray(rng.integers(3, vocab, (3, 5)))
  source = source.at[1, 3:].set(0)  # Padding the source attention skips.
  inputs = jnp.asarray(rng.integers(3, vocab, (3, 12)))  # Decoder inputs.
  outputs = model.run(source, inputs)  # No cache.
  features = outputs.features  # [3, 12, d (or 2d with a lower layer)].
  cache = model.init_cache(3, 16, source)

  def choose(index, logits):  # Not the argmax: the draft must follow it.
    assert logits.shape == (3, vocab)
    return (jnp.argmax(logits, -1) + index + 1) % vocab

  def check(cache, start, n, last):
    """Drafts after position start + last from the n positions at start."""
    window = slice(start, start + n)
    proposals, logits, cache = model.draft(
        cache, features[:, window], inputs[:, start + 1:start + n + 1],
        jnp.full((3,), start), jnp.full((3,), last), choose, 4)
    assert proposals.shape == (3, 3)
    anchor = start + last
    # Heads 2..4 at the anchor read token anchor + 1, then the proposals;
    # every earlier position reads its true next token.
    next_tokens = np.array(jnp.stack(
        [jnp.roll(inputs, -1, axis=1)] * 3, axis=-1))
    next_tokens[:, anchor, 1:] = np.asarray(proposals[:, :2])
    expected = model.head_logits(outputs, 1, 3, jnp.asarray(next_tokens))
    np.testing.assert_allclose(logits, expected[:, anchor], rtol=1e-4,
                               atol=1e-4)
    np.testing.assert_array_equal(
        proposals, (jnp.argmax(logits, -1) + jnp.arange(1, 4)) % vocab)
    return cache

  cache = check(cache, 0, 6, 2)  # Positions 3..5 stale, drafts at 3..4.
  check(cache, 3, 4, 1)  # Overwrites them; drafts after position 4.
  with pytest.raises(ValueError, match='pass next_tokens'):
    model.head_states(outputs, 1, 3)
  with pytest.raises(TypeError, match='call Transformer.draft'):
    model.proposal_logits(cache, features[:, :4], inputs[:, 1:5],
                          jnp.zeros((3,), jnp.int32),
                          jnp.zeros((3,), jnp.int32), 3)


@pytest.mark.parametrize('head_layer, drafter', [
    ('sequential', {}), ('autoregressive', dict(draft_source='base')),
    ('block_corrected', {}),
    pytest.param('autoregressive', dict(**llama_like.QWEN2,
                                        draft_feature_layers=(0,)),
                 marks=pytest.mark.slow)])
def test_a_tree_grown_level_by_level_drafts_each_leaf_as_its_chain(
    head_layer, drafter):
  """draft_tree drafts each node once, a level's nodes in one step: every
  node's logits are those of a chain draft made along its path (the draft
  layer's nodes attending to their own path's entries, not their
  siblings')."""
  from bpd_jax.decoding import tree as tree_lib  # pylint: disable=g-import-not-at-top
  from bpd_jax.decoding import tree_growth  # pylint: disable=g-import-not-at-top
  model = Transformer(TransformerConfig(**{
      **TINY, 'num_proposal_heads': 4, 'dropout_rate': 0.0,
      'head_layer': head_layer, **drafter}), rngs=nnx.Rngs(0))
  vocab = TINY['vocab_size']
  rng = np.random.default_rng(1)
  source = jnp.asarray(rng.integers(3, vocab, (3, 5)))
  inputs = jnp.asarray(rng.integers(3, vocab, (3, 12)))
  features = model.run(source, inputs).features
  cache = model.init_cache(3, 20, source)
  args = (features[:, :6], inputs[:, 1:7], jnp.zeros((3,), jnp.int32),
          jnp.full((3,), 3))
  tree = tree_lib.Tree.from_widths((2, 3, 1), 3)
  logits_of = {}

  def choose(level, logits, count):
    tokens, drawn = tree_growth.greedy_children(level, logits, count)
    logits_of[level] = logits
    return tokens, drawn

  growth = tree_growth.StaticGrowth(tree, choose)
  model.draft_tree(cache, *args, growth.grow, 4)
  block = growth.block(inputs[:, 4])
  node_logits = growth.node_logits()
  for leaf in tree.leaves:
    def ranked(index, logits, leaf=leaf):
      return jax.lax.top_k(logits, leaf[index] + 1)[1][:, leaf[index]]
    chain, logits, _ = model.draft(cache, *args, ranked, 4)
    nodes = [tree.paths.index(leaf[:d]) + 1 for d in range(1, 4)]
    np.testing.assert_array_equal(block.tokens[:, nodes], chain)
    np.testing.assert_allclose(node_logits[:, nodes], logits, rtol=1e-4,
                               atol=1e-4)
  assert set(logits_of) == {0, 1, 2}


@pytest.mark.parametrize('encoder_layers, fields', [
    # The encoder-decoder's trees: slow here, by default in
    # tests/test_generate.py's exact tree property and head-layer cases.
    pytest.param(2, dict(positions='sinusoidal'), marks=pytest.mark.slow),
    (0, dict(positions='learned')), (0, llama_like.LLAMA)])
def test_a_tree_node_decodes_as_its_path_and_commit_writes_the_chain(
    encoder_layers, fields):
  """extend_tree: each node's output is that of its path decoded as a
  chain; commit: the winning path's entries, moved into place, are the
  chain's entries. Stale entries past the root (an earlier block) are
  never read. Rotary keys are rotated by each node's depth in its path."""
  from bpd_jax.decoding import tree as tree_lib  # pylint: disable=g-import-not-at-top
  with jax.enable_x64(True):
    config = TransformerConfig(**{
        **TINY, 'num_encoder_layers': encoder_layers, **fields,
        'dtype': 'float64', 'param_dtype': 'float64'})
    model = Transformer(config, rngs=nnx.Rngs(4))
    source = jnp.asarray([[5, 6, 7, 1], [4, 9, 1, 0]]) if encoder_layers \
        else None
    rng = np.random.default_rng(2)
    prefix = jnp.asarray(rng.integers(3, 11, (2, 6)), jnp.int32)
    start = jnp.asarray([3, 5], jnp.int32)  # Each example's root position.
    cache = model.init_cache(2, 24, source)
    _, cache = extend(model, cache, prefix, jnp.zeros_like(start))
    # Three drafts of three proposals after each example's root.
    roots = jnp.take_along_axis(prefix, start[:, None], axis=1)
    proposals = jnp.asarray(rng.integers(3, 6, (2, 3, 3)), jnp.int32)
    drafts = jnp.concatenate([jnp.broadcast_to(roots[:, None], (2, 3, 1)),
                              proposals], axis=2)
    block = tree_lib.from_drafts(drafts, (3, 3, 3), 10)
    features, tree_cache = nnx.jit(lambda m, c: m.extend_tree(
        c, block.tokens, start, block.depths, block.ancestors))(model, cache)
    for example in range(2):
      for node in np.flatnonzero(block.valid[example]):
        path = np.flatnonzero(block.ancestors[example, node])
        chain = block.tokens[example, path][None]
        one = jax.tree.map(lambda x: x[example:example + 1], cache)
        out, _ = extend(model, one, chain, start[example:example + 1])
        np.testing.assert_allclose(features[example, node], out[0, -1],
                                   rtol=1e-9, atol=1e-9)
    # Commit each example's last node's path; compare with its chain.
    last = jnp.asarray([int(np.flatnonzero(block.valid[i])[-1])
                        for i in range(2)])
    on_path = jnp.take_along_axis(block.ancestors, last[:, None, None],
                                  axis=1)[:, 0]
    path = jnp.stack([jnp.argmax(on_path & (block.depths == d), axis=1)
                      for d in range(4)], axis=1)
    committed = model.commit(tree_cache, start, path)
    chain = jnp.take_along_axis(block.tokens, path, axis=1)
    _, chained = extend(model, cache, chain, start)
    for layer, layer_chain in zip(committed.self_attention,
                                  chained.self_attention):
      for example in range(2):
        depth = int(block.depths[example, last[example]])
        span = slice(int(start[example]), int(start[example]) + depth + 1)
        np.testing.assert_allclose(layer.key[example, span],
                                   layer_chain.key[example, span],
                                   rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(layer.value[example, span],
                                   layer_chain.value[example, span],
                                   rtol=1e-9, atol=1e-9)
