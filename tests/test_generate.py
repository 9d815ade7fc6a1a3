"""Greedy and blockwise decoding of real (randomly initialised) Transformers.

The central guarantee: exact blockwise decoding returns the greedy output,
token for token, on every example of a batch. Scoring k positions in one
call can differ from scoring them one at a time in the last bits of the
logits; where that flips an argmax, the test demands that it was a near-tie
of the scoring model (top-2 margin below NEAR_TIE) rather than loosening the
comparison. The models run in float64, where such ties are vanishingly rare.
"""


import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bpd_jax import generate
from bpd_jax.bench import near_ties
from bpd_jax.infra import sharding
from bpd_jax.decoding import (DecodeOptions, Distance, DynamicTree, Exact,
                              Lookup, Refinement, Sampler, TopK, Tree,
                              Typical)
from bpd_jax.decoding import tree as tree_lib
from bpd_jax.models import Transformer, TransformerConfig
from bpd_jax.models.mixture import OutputMixture
from bpd_jax.rescorers import ngram

import llama_like
import repeating_drafters

NEAR_TIE = 1e-9  # float64 logits of ~1: differences of ~1e-15 are rounding.
VOCAB = 7  # Small, so random heads are often right and EOS comes early.
MAX_HEADS = 10
HEAD_LAYERS = ('independent', 'joint', 'sequential',
               'autoregressive', 'block')  # Every head type.
# Every drafter: the head types, the block drafter with its correction
# (reading the proposal before, or that and the corrected state before),
# and the draft layer and the block drafter reading the source (through
# the base's keys and values, or the draft layer's own) or a lower layer.
DRAFTERS = HEAD_LAYERS + ('block_corrected', 'autoregressive:source=base',
                          'autoregressive:source=own',
                          'autoregressive:features=0',
                          'block:source=base', 'block:features=0',
                          'block_corrected:recurrent')

# Drafting vocabularies (`generate.Decoder(draft_vocab=...)`): the whole
# vocabulary, or any non-empty subset of its ids.
DRAFT_VOCABS = st.one_of(st.none(), st.lists(
    st.integers(0, VOCAB - 1), min_size=1, max_size=VOCAB, unique=True))


def drafter_fields(drafter: str, encoder_layers: int) -> dict:
  """TransformerConfig fields of a DRAFTERS name. A decoder-only model has
  no source: its source-reading drafters are the plain draft layer."""
  head_layer, _, option = drafter.partition(':')
  fields = dict(head_layer=head_layer)
  if option == 'features=0':
    fields['draft_feature_layers'] = (0,)
  elif option == 'recurrent':
    fields['correction_recurrent'] = True
  elif option and encoder_layers:
    fields['draft_source'] = option.partition('=')[2]
  return fields


def random_model(seed, encoder_layers=2, head_layer='independent',
                 head1_from_base=True, scale=3.0, head_scale=1.0,
                 dtype='float64', architecture='paper', **overrides):
  """A tiny random model (head_layer: one of DRAFTERS) of one of
  llama_like.ARCHITECTURES.

  Weights are scaled by `scale` (larger: more varied output) and the heads'
  output weights further by `head_scale`: at 0 every head proposes head 1's
  token again, which random models, prone to repeating themselves, often
  accept, so the tests see long accepted blocks as well as rejections.
  """
  config = TransformerConfig(**{
      **dict(vocab_size=VOCAB, d_model=16, d_ff=32, num_heads=2,
             num_encoder_layers=encoder_layers, num_decoder_layers=2,
             dropout_rate=0.0, max_source_len=16, max_target_len=64,
             tie_output=False, num_proposal_heads=MAX_HEADS,
             **drafter_fields(head_layer, encoder_layers), head_hidden=16,
             head1_from_base=head1_from_base, dtype=dtype, param_dtype=dtype),
      **llama_like.ARCHITECTURES[architecture], **overrides})
  model = Transformer(config, rngs=nnx.Rngs(seed))
  graphdef, state = nnx.split(model)
  state = jax.tree.map(lambda x: x * scale if jnp.issubdtype(
      x.dtype, jnp.floating) else x, state)
  model = nnx.merge(graphdef, state)
  if head_scale != 1.0:
    repeating_drafters.scale_heads(model, head_scale)
  return model


def random_inputs(seed, batch, length=6):
  """Right-padded inputs of different lengths, ids in [2, VOCAB)."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(2, VOCAB, (batch, length))
  lengths = rng.integers(1, length + 1, batch)
  return np.where(np.arange(length) < lengths[:, None], tokens, 0)


def scoring_logits(model, inputs, i, prefix):
  """Head-1 logits of example i after `prefix`, by a full forward pass."""
  return near_ties.scoring_logits(model, inputs[i], prefix)


def assert_same_or_near_tie(model, inputs, reference, result):
  """Tokens equal, or the first difference sits on a scoring near-tie."""
  for i in range(inputs.shape[0]):
    expected = np.asarray(reference.tokens[i])
    actual = np.asarray(result.tokens[i])
    if (expected == actual).all():
      assert reference.lengths[i] == result.lengths[i]
      continue
    j = int(np.argmax(expected != actual))
    logits = np.sort(scoring_logits(model, inputs, i, expected[:j]))
    margin = logits[-1] - logits[-2]
    assert margin < NEAR_TIE, (
        f'example {i} differs at token {j} ({expected[j]} vs {actual[j]}) '
        f'with a top-2 margin of {margin}, not a near-tie')


def exact_blockwise_equals_greedy(max_examples):
  """The property over random models and inputs, checked on that many."""

  @hypothesis.settings(max_examples=max_examples, deadline=None,
                       suppress_health_check=[
                           hypothesis.HealthCheck.too_slow])
  @hypothesis.given(
      seed=st.integers(0, 2**16),
      k=st.integers(1, MAX_HEADS),
      batch=st.sampled_from([1, 3, 4]),
      encoder_layers=st.sampled_from([2, 0]),
      head_layer=st.sampled_from(DRAFTERS),
      head_scale=st.sampled_from([0.0, 0.3, 1.0]),
      max_len=st.sampled_from([5, 20]),
      architecture=st.sampled_from(sorted(llama_like.ARCHITECTURES)),
      draft_vocab=DRAFT_VOCABS)
  def check(seed, k, batch, encoder_layers, head_layer, head_scale, max_len,
            architecture, draft_vocab):
    with jax.enable_x64(True):
      model = random_model(seed, encoder_layers, head_layer,
                           head_scale=head_scale, architecture=architecture)
      inputs = random_inputs(seed, batch)
      reference = generate.greedy(model, inputs, max_len=max_len)
      result = generate.blockwise(model, inputs, k=k, max_len=max_len,
                                  draft_vocab=draft_vocab)
      assert_same_or_near_tie(model, inputs, reference, result)
      assert (result.model_calls <= reference.model_calls).all()
      assert (result.block_sizes.sum(1) == result.model_calls).all()
      np.testing.assert_array_equal(
          (result.block_sizes * np.arange(k + 1)).sum(1), result.lengths)

  return check


# Each example compiles two programs: 5 in the default run, 60 with slow.
test_exact_blockwise_equals_greedy = exact_blockwise_equals_greedy(5)
test_exact_blockwise_equals_greedy_on_many_models = pytest.mark.slow(
    exact_blockwise_equals_greedy(60))


def exact_tree_decoding_equals_greedy(max_examples):
  """The property with a tree of the heads' candidates verified per call."""

  @hypothesis.settings(max_examples=max_examples, deadline=None,
                       suppress_health_check=[
                           hypothesis.HealthCheck.too_slow])
  @hypothesis.given(
      seed=st.integers(0, 2**16),
      k=st.integers(2, 6),
      widths=st.sampled_from([(2,), (2, 2), (3, 1, 2), (1, 3),
                              'dynamic:6,top=2,frontier=2',
                              'dynamic:9,top=3,frontier=2']),
      batch=st.sampled_from([1, 3]),
      encoder_layers=st.sampled_from([2, 0]),
      head_layer=st.sampled_from(DRAFTERS),
      head_scale=st.sampled_from([0.0, 0.3, 1.0]),
      architecture=st.sampled_from(sorted(llama_like.ARCHITECTURES)),
      draft_vocab=DRAFT_VOCABS)
  def check(seed, k, widths, batch, encoder_layers, head_layer, head_scale,
            architecture, draft_vocab):
    if isinstance(widths, str):  # Made each call from the drafter's q.
      # At the least k whose levels draft its nodes.
      k = max(k, tree_lib.shallowest(widths) + 1)
      tree = Tree.from_spec(widths, k - 1)
    else:
      tree = Tree.from_widths(widths[:k - 1], k - 1)
    with jax.enable_x64(True):
      model = random_model(seed, encoder_layers, head_layer,
                           head_scale=head_scale, architecture=architecture)
      inputs = random_inputs(seed, batch)
      reference = generate.greedy(model, inputs, max_len=16)
      result = generate.blockwise(model, inputs, k=k, max_len=16, tree=tree,
                                  draft_vocab=draft_vocab)
      assert_same_or_near_tie(model, inputs, reference, result)
      np.testing.assert_array_equal(
          (result.block_sizes * np.arange(k + 1)).sum(1), result.lengths)
      # The argmax chain is one of a static tree's paths: from the prompt,
      # the tree's first call accepts no fewer tokens than the chain's.
      # (Over a whole decode no order holds: the calls then start at other
      # positions, where the drafts differ. A dynamic tree keeps its most
      # probable nodes, which need not hold the chain.)
      if isinstance(widths, str):
        return
      decoder = generate.Decoder(model, draft_vocab=draft_vocab)
      first = [decoder.decode(inputs, DecodeOptions(max_len=16, k=k,
                                                    tree=drafts),
                              iterations=1).lengths
               for drafts in (tree, None)]
      assert (np.asarray(first[0]) >= np.asarray(first[1])).all()

  return check


test_exact_tree_decoding_equals_greedy = exact_tree_decoding_equals_greedy(3)
test_exact_tree_decoding_equals_greedy_on_many_models = pytest.mark.slow(
    exact_tree_decoding_equals_greedy(30))


# Drafters that need no training, alone (any k) and beside the heads.
LOOKUPS = ['lookup', 'lookup:min=1', 'lookup:max=4,min=1,heads=fallback',
           'lookup:min=1,heads=tree', 'lookup:max=2,heads=tree', 'ngram',
           'ngram:min=1,heads=fallback', 'ngram:heads=tree']


def ngram_of(model, seed, order, reference=None):
  """An n-gram model of random sentences, and of the greedy outputs of
  the first examples if given (so that its drafts are accepted there)."""
  rng = np.random.default_rng(seed)
  corpus = [list(rng.integers(0, VOCAB, 8)) for _ in range(20)]
  if reference is not None:
    tokens, lengths = np.asarray(reference.tokens), np.asarray(
        reference.lengths)
    corpus += [list(row[:n]) for row, n in zip(tokens[:2], lengths[:2])]
  return ngram.build(corpus, order=order, vocab_size=VOCAB,
                     bos_id=model.config.bos_id, eos_id=model.config.eos_id)


def exact_lookup_decoding_equals_greedy(max_examples):
  """The property with prompt lookup drafting (`decoding.Lookup`)."""

  @hypothesis.settings(max_examples=max_examples, deadline=None,
                       suppress_health_check=[
                           hypothesis.HealthCheck.too_slow])
  @hypothesis.given(
      seed=st.integers(0, 2**16),
      k=st.integers(2, 12),
      drafter=st.sampled_from(LOOKUPS),
      batch=st.sampled_from([1, 3]),
      encoder_layers=st.sampled_from([2, 0]),
      head_layer=st.sampled_from(DRAFTERS),
      head_scale=st.sampled_from([0.0, 0.3, 1.0]),
      architecture=st.sampled_from(sorted(llama_like.ARCHITECTURES)),
      criterion=st.sampled_from([Exact(), TopK(1)]),
      order=st.integers(1, 4))
  def check(seed, k, drafter, batch, encoder_layers, head_layer, head_scale,
            architecture, criterion, order):
    if 'heads=' in drafter:  # The heads draft too: k is theirs.
      k = min(k, MAX_HEADS)
    # An n-gram model finds contexts of order - 1 tokens at most: one of
    # an order below the drafter's min is refused (check_order).
    order = max(order, Lookup.from_spec(drafter).min_ngram)
    with jax.enable_x64(True):
      model = random_model(seed, encoder_layers, head_layer,
                           head_scale=head_scale, architecture=architecture)
      inputs = random_inputs(seed, batch, length=10)
      reference = generate.greedy(model, inputs, max_len=24)
      lm = (ngram_of(model, seed, order, reference)
            if drafter.startswith('ngram') else None)
      result = generate.blockwise(model, inputs, k=k, max_len=24,
                                  drafter=drafter, criterion=criterion,
                                  ngram=lm)
      assert_same_or_near_tie(model, inputs, reference, result)
      assert (result.model_calls <= reference.model_calls).all()
      np.testing.assert_array_equal(
          (result.block_sizes * np.arange(k + 1)).sum(1), result.lengths)

  return check


test_exact_lookup_decoding_equals_greedy = (
    exact_lookup_decoding_equals_greedy(3))
test_exact_lookup_decoding_equals_greedy_on_many_models = pytest.mark.slow(
    exact_lookup_decoding_equals_greedy(40))


def test_lookup_drafts_on_repeating_output_and_past_the_heads():
  """A model that repeats itself: the lookup alone accepts long blocks,
  at a k beyond the model's heads, and the same with every example's
  output its own."""
  with jax.enable_x64(True):
    model = random_model(4, 2, 'independent', head_scale=0.3)
    inputs = random_inputs(4, 4)
    reference = generate.greedy(model, inputs, max_len=30)
    decoder = generate.Decoder(model)
    result = decoder.blockwise(inputs, k=MAX_HEADS + 4, max_len=30,
                               drafter='lookup:min=1')
    assert_same_or_near_tie(model, inputs, reference, result)
    assert float(result.mean_block_size) > 3.0
    for i in range(inputs.shape[0]):
      alone = decoder.blockwise(inputs[i:i + 1], k=MAX_HEADS + 4, max_len=30,
                                drafter='lookup:min=1')
      np.testing.assert_array_equal(alone.tokens[0], result.tokens[i])


def test_lookup_searches_an_encoder_decoders_source_then_its_prompt():
  # What the loop's lookup searches before the output
  # (tests/test_blockwise.py: it drafts from it): the source's tokens, then
  # bos; a decoder-only model's prompt and an n-gram model's target side
  # alone (None).
  with jax.enable_x64(True):  # The test models' float64 weights.
    config = random_model(0, 2).config
  source = jnp.array([[5, 6, 1, 0], [4, 1, 0, 0]])
  prompt = jnp.full((2, 1), config.bos_id)
  lookup = Lookup()
  tokens, lengths = generate._searched(  # pylint: disable=protected-access
      config, source, prompt, jnp.ones((2,), jnp.int32), lookup)
  bos = config.bos_id
  np.testing.assert_array_equal(tokens[:, :4], [[5, 6, 1, bos],
                                                [4, 1, bos, -1]])
  np.testing.assert_array_equal(lengths, [4, 3])
  assert generate._searched(  # pylint: disable=protected-access
      config, None, prompt, jnp.ones((2,), jnp.int32), lookup) is None
  assert generate._searched(  # pylint: disable=protected-access
      config, source, prompt, jnp.ones((2,), jnp.int32),
      Lookup(source='ngram')) is None


def test_ngram_drafts_the_continuations_it_was_built_from():
  with jax.enable_x64(True):
    model = random_model(5, 0, 'joint', architecture='llama')
    inputs = random_inputs(5, 3)
    reference = generate.greedy(model, inputs, max_len=20)
    lm = ngram_of(model, 0, 4, reference)
    result = generate.blockwise(model, inputs, k=6, max_len=20,
                                drafter='ngram:min=3', ngram=lm)
    assert_same_or_near_tie(model, inputs, reference, result)
    # The two examples it has seen: more than two tokens a call.
    calls = np.asarray(result.model_calls)
    assert (2 * calls[:2] < np.asarray(reference.lengths)[:2]).all()
    with pytest.raises(ValueError, match="drafter 'ngram' needs an n-gram "
                       r'model: Decoder\(model, ngram=...\)'):
      generate.blockwise(model, inputs, k=3, max_len=20, drafter='ngram')
    with pytest.raises(ValueError, match='the n-gram model has a vocabulary '
                       f'of 5, the decoded model {VOCAB}'):
      generate.Decoder(model, ngram=ngram.build(
          [[1, 2]], order=2, vocab_size=5, bos_id=0, eos_id=1))


def test_an_ngram_drafter_whose_min_its_model_cannot_reach_is_refused():
  model = random_model(5, 0, 'joint', architecture='llama')
  lm = ngram_of(model, 0, 3)
  # An order-3 model's contexts hold 2 tokens: min=4 would never propose.
  with pytest.raises(ValueError, match=r"^drafter 'ngram:max=4,min=4': min=4 asks "
                     r'for contexts of 3 tokens, but the n-gram model of '
                     r'order 3 finds 2 at most: min <= 3\.$'):
    generate.blockwise(model, random_inputs(5, 3), k=3, max_len=8,
                       drafter='ngram:max=4,min=4', ngram=lm)


@pytest.mark.parametrize('k', [2, 5, 8])
def test_exact_blockwise_equals_greedy_with_local_attention(k):
  """The Image Transformer's decoder: local attention, long outputs (more
  query blocks than the window holds), every example at its own offset."""
  with jax.enable_x64(True):
    model = random_model(5, head_scale=0.0, max_target_len=64 + MAX_HEADS,
                         local_attention_block=4, local_attention_memory=4)
    inputs = random_inputs(5, 3)
    reference = generate.greedy(model, inputs, max_len=60)
    result = generate.blockwise(model, inputs, k=k, max_len=60)
    assert_same_or_near_tie(model, inputs, reference, result)
    assert int(result.block_sizes[:, 2:].sum()) > 0
    assert int(reference.lengths.max()) > 3 * 4  # Past several blocks.


EVERY_K = tuple(range(1, MAX_HEADS + 1))


# Each k compiles its own decode: the default run takes the smallest k, one
# between and the largest (the property test above draws k from all of
# them); the slow run every k on more models.
@pytest.mark.parametrize('encoder_layers, models, ks', [
    (2, ((1, 0.0),), (1, 3, MAX_HEADS)),
    pytest.param(2, ((1, 0.0),), EVERY_K, marks=pytest.mark.slow),
    pytest.param(0, ((2, 1.0),), EVERY_K, marks=pytest.mark.slow),
    pytest.param(2, ((2, 1.0),), EVERY_K, marks=pytest.mark.slow),
    pytest.param(0, ((1, 0.0),), EVERY_K, marks=pytest.mark.slow)])
def test_k_from_1_to_10(encoder_layers, models, ks):
  # (seed, head_scale): heads near the base's output (0.0) accept long
  # blocks, random ones (1.0) short ones.
  with jax.enable_x64(True):
    for seed, head_scale in models:
      model = random_model(seed, encoder_layers, head_scale=head_scale)
      inputs = random_inputs(seed, 4)
      reference = generate.greedy(model, inputs, max_len=24)
      accepted_blocks = 0
      for k in ks:
        result = generate.blockwise(model, inputs, k=k, max_len=24)
        assert_same_or_near_tie(model, inputs, reference, result)
        accepted_blocks += int(result.block_sizes[:, 2:].sum())
      assert accepted_blocks > 0  # The comparison saw accepted proposals.


def test_head1_through_layer_is_verified_against_itself():
  # With head 1 behind the new layer, greedy decoding is that head's output.
  with jax.enable_x64(True):
    model = random_model(5, head1_from_base=False)
    inputs = random_inputs(5, 3)
    reference = generate.greedy(model, inputs, max_len=16)
    result = generate.blockwise(model, inputs, k=4, max_len=16)
    assert_same_or_near_tie(model, inputs, reference, result)


def test_float32_blockwise_equals_greedy():
  model = random_model(7, dtype='float32')
  inputs = random_inputs(7, 4)
  reference = generate.greedy(model, inputs, max_len=20)
  result = generate.blockwise(model, inputs, k=4, max_len=20)
  tie = 1e-4  # float32 rounding of logits of ~1.
  for i in range(4):
    expected, actual = reference.tokens[i], result.tokens[i]
    if not (expected == actual).all():
      j = int(np.argmax(expected != actual))
      logits = np.sort(scoring_logits(model, inputs, i, expected[:j]))
      assert logits[-1] - logits[-2] < tie


@pytest.mark.parametrize('head_layer', [
    'autoregressive', pytest.param('independent', marks=pytest.mark.slow)])
def test_bfloat16_llama_blockwise_equals_greedy(head_layer):
  """A bfloat16 model is verified as it computes in bfloat16 (its logits
  in float32): blockwise equals greedy decoding, but where a near-tie of
  its bfloat16 scoring could flip with the number of positions scored."""
  model = random_model(7, 0, head_layer, head_scale=0.3, dtype='bfloat16',
                       architecture='llama')
  inputs = random_inputs(7, 4)
  reference = generate.greedy(model, inputs, max_len=20)
  result = generate.blockwise(model, inputs, k=4, max_len=20)
  tree = generate.blockwise(model, inputs, k=4, max_len=20,
                            tree=Tree.from_widths((2, 2), 3))
  assert float(result.mean_block_size) > 1.0
  tie = 0.1  # A few roundings of bfloat16 features, through the logits.
  for decoded in (result, tree):
    for i in range(4):
      expected, actual = reference.tokens[i], decoded.tokens[i]
      if not (expected == actual).all():
        j = int(np.argmax(expected != actual))
        logits = np.sort(scoring_logits(model, inputs, i, expected[:j]))
        assert logits[-1] - logits[-2] < tie


def test_batch_equals_each_example_alone():
  with jax.enable_x64(True):
    for encoder_layers in (2, 0):
      model = random_model(11, encoder_layers)
      inputs = random_inputs(11, 4)
      batch = generate.blockwise(model, inputs, k=3, max_len=12)
      for i in range(4):
        # Each example alone, with its padding trimmed.
        alone_inputs = inputs[i:i + 1, :max(1, int((inputs[i] != 0).sum()))]
        alone = generate.blockwise(model, alone_inputs, k=3, max_len=12)
        np.testing.assert_array_equal(batch.tokens[i], alone.tokens[0])
        assert batch.model_calls[i] == alone.model_calls[0]


def test_approximate_criteria_run_and_accept_more():
  with jax.enable_x64(True):
    model = random_model(3)
    inputs = random_inputs(3, 4)
    exact = generate.blockwise(model, inputs, k=4, max_len=20)
    for criterion in (TopK(3), Distance(2.0)):
      loose = generate.blockwise(model, inputs, k=4, max_len=20,
                                 criterion=criterion)
      assert loose.mean_block_size >= exact.mean_block_size
    forced = generate.blockwise(model, inputs, k=4, max_len=20, min_block=4)
    # Every call but the first appends 4 tokens, unless eos or max_len cut it.
    assert (forced.block_sizes[:, 1] <= 2).all()


@pytest.mark.parametrize('k,head_layer,encoder_layers,architecture', [
    # Every head type at the paper's k; the draft layer's options (20-30 s
    # each at k=8) at k=3 by default.
    *((8, drafter, 2, 'paper') for drafter in HEAD_LAYERS),
    *(pytest.param(8, drafter, 2, 'paper', marks=pytest.mark.slow)
      for drafter in DRAFTERS[len(HEAD_LAYERS):]),
    pytest.param(8, 'autoregressive:features=0', 0, 'paper',  # Decoder-only,
                 marks=pytest.mark.slow),  # a lower layer (property-drawn).
    (4, 'block_corrected', 0, 'paper'),
    (4, 'block_corrected:recurrent', 2, 'paper'),
    (3, 'sequential', 2, 'paper'), (3, 'autoregressive', 2, 'paper'),
    # The draft layer's own source: by default on split parameters
    # (tests/test_generate_sharded.py).
    pytest.param(3, 'autoregressive:source=own', 2, 'paper',
                 marks=pytest.mark.slow),
    # Every head type on a Llama-family base (decoder-only, as the family
    # is), each verified as a tree too; the draft layer reading the source
    # through an encoder-decoder's grouped keys and values.
    # (The draft layer on a Llama base by default in the bfloat16 and
    # stop-id tests below; here slow.)
    *((6, drafter, 0, 'llama') for drafter in HEAD_LAYERS
      if drafter not in ('autoregressive', 'independent')),
    pytest.param(6, 'independent', 0, 'llama', marks=pytest.mark.slow),
    pytest.param(6, 'autoregressive', 0, 'llama', marks=pytest.mark.slow),
    (4, 'independent', 0, 'qwen2'),
    # (The draft layer reading the source on a Qwen2 base: slow; by
    # default in tests/test_transformer.py's drafts and trees.)
    pytest.param(4, 'autoregressive:source=base', 2, 'qwen2',
                 marks=pytest.mark.slow),
    pytest.param(3, 'independent', 2, 'paper', marks=pytest.mark.slow),
    pytest.param(3, 'joint', 2, 'paper', marks=pytest.mark.slow),
    pytest.param(3, 'autoregressive:source=base', 2, 'paper',
                 marks=pytest.mark.slow),
    *(pytest.param(3, drafter, 0, 'llama', marks=pytest.mark.slow)
      for drafter in (*HEAD_LAYERS, 'autoregressive:features=0'))])
def test_exact_blockwise_equals_greedy_for_every_head_layer(
    k, head_layer, encoder_layers, architecture):
  """Every drafter on a few fixed models, beside the property test's
  random draw of them: heads that read each other's proposals, the draft
  layer that reads the source or a lower layer; on the project's own
  Transformer and on Llama-family bases."""
  # (seed, head_scale): models whose outputs run long enough to accept
  # proposals and reject others.
  models = ((3, 0.0), (4, 0.3)) if architecture == 'paper' else ((5, 0.0),
                                                                 (8, 0.3))
  with jax.enable_x64(True):
    for seed, head_scale in models:
      model = random_model(seed, encoder_layers, head_layer,
                           head_scale=head_scale, architecture=architecture)
      inputs = random_inputs(seed, 4)
      reference = generate.greedy(model, inputs, max_len=20)
      result = generate.blockwise(model, inputs, k=k, max_len=20)
      assert_same_or_near_tie(model, inputs, reference, result)
      assert float(result.mean_block_size) > 1.0
      # The new drafters and bases verified as trees too.
      if ':' in head_layer or head_layer == 'block_corrected' or (
          architecture != 'paper'):
        # A static tree on one model, a dynamic one on the other.
        # (7 nodes: what its levels draft at k = 3.)
        tree = (Tree.from_widths((2, 2), k - 1) if seed % 2 else
                DynamicTree(size=7, depth=k - 1, top=2, frontier=2))
        assert_same_or_near_tie(model, inputs, reference, generate.blockwise(
            model, inputs, k=k, max_len=20, tree=tree))


# The draft layer and the block drafter by default, the others slow.
@pytest.mark.parametrize('head_layer', [
    pytest.param(head_layer, marks=pytest.mark.slow)
    if head_layer in ('independent', 'joint', 'sequential') else head_layer
    for head_layer in HEAD_LAYERS])
def test_exact_blockwise_equals_greedy_with_a_mixture_output(head_layer):
  """A discretized logistic mixture in place of the vocabulary projection
  (models/mixture.py): its argmax, the mixture's mode, is what greedy and
  verification read, for every head type."""
  with jax.enable_x64(True):
    for seed, head_scale in ((3, 0.0), (4, 0.3)):
      model = random_model(seed, 2, head_layer, head_scale=head_scale,
                           vocab_size=3 + 12, mixture=OutputMixture(2, 3))
      inputs = random_inputs(seed, 4)
      reference = generate.greedy(model, inputs, max_len=20)
      result = generate.blockwise(model, inputs, k=6, max_len=20)
      assert_same_or_near_tie(model, inputs, reference, result)
      assert float(result.mean_block_size) > 1.0
      # Only values: pad, eos and bos get the floor's mass (1e-30).
      assert (np.asarray(reference.tokens) >= 3).all()


@pytest.mark.parametrize('encoder_layers,head_layer', [
    (2, 'independent'), (2, 'autoregressive:source=base'), (0, 'block'),
    pytest.param(2, 'joint', marks=pytest.mark.slow),
    pytest.param(2, 'sequential', marks=pytest.mark.slow),
    pytest.param(0, 'autoregressive', marks=pytest.mark.slow),
    pytest.param(2, 'block:source=base', marks=pytest.mark.slow)])
def test_drafts_come_from_the_drafting_vocabulary(encoder_layers, head_layer):
  """Heads that repeat head 1's token draft only the drafting vocabulary's
  ids: without the ids of the output, every call appends one token; with
  the whole vocabulary, as without one; the output is greedy's in both."""
  with jax.enable_x64(True):
    model = random_model(3, encoder_layers, head_layer, head_scale=0.0)
    inputs = random_inputs(3, 4)
    reference = generate.greedy(model, inputs, max_len=20)
    plain = generate.blockwise(model, inputs, k=4, max_len=20)
    assert float(plain.mean_block_size) > 1.5
    unused = sorted(set(range(VOCAB)) - set(np.asarray(
        reference.tokens).ravel().tolist()))
    assert unused, 'the outputs use every id'
    cut = generate.blockwise(model, inputs, k=4, max_len=20,
                             draft_vocab=unused)
    assert_same_or_near_tie(model, inputs, reference, cut)
    np.testing.assert_array_equal(cut.model_calls, reference.model_calls)
    whole = generate.blockwise(model, inputs, k=4, max_len=20,
                               draft_vocab=np.arange(VOCAB)[::-1])
    np.testing.assert_array_equal(whole.tokens, plain.tokens)
    np.testing.assert_array_equal(whole.block_sizes, plain.block_sizes)


@pytest.mark.parametrize('draft_vocab,message', [
    ([], 'a non-empty 1-D list of token ids'),
    ([[1, 2]], 'a non-empty 1-D list of token ids'),
    ([1.0, 2.0], 'a non-empty 1-D list of token ids'),
    ([1, 7], r'ids outside \[0, 7\) \(the vocabulary\): 1 .. 7'),
    ([-1, 2], r'ids outside \[0, 7\)'),
    ([2, 3, 2], 'holds an id twice'),
])
def test_bad_drafting_vocabularies(small_model, draft_vocab, message):
  with pytest.raises(ValueError, match=message):
    generate.Decoder(small_model, draft_vocab=draft_vocab)


def test_a_mixture_output_has_no_drafting_vocabulary():
  model = random_model(3, 2, vocab_size=3 + 12, mixture=OutputMixture(2, 3),
                       dtype='float32')
  with pytest.raises(ValueError, match='a mixture output .* has no such '
                     'projection'):
    generate.blockwise(model, random_inputs(3, 1), k=3, max_len=4,
                       draft_vocab=[3, 4])


@pytest.mark.parametrize('encoder_layers,head_layer', [
    # By default in tests/test_generate_sharded.py (the batch split over
    # a mesh, with split parameters and without).
    *(pytest.param(*case, marks=pytest.mark.slow) for case in (
        (2, 'independent'), (2, 'sequential'), (0, 'autoregressive'),
        (0, 'independent')))])
def test_sharded_over_8_devices_equals_unsharded(encoder_layers, head_layer):
  assert jax.device_count() == 8, 'tests/conftest.py sets 8 CPU devices'
  mesh = jax.make_mesh((8,), ('data',),
                       axis_types=(jax.sharding.AxisType.Auto,))
  with jax.enable_x64(True):
    model = random_model(13, encoder_layers, head_layer)
    inputs = random_inputs(13, 8)
    tree = Tree.from_widths((2, 2), 3)
    for run in (lambda **kw: generate.greedy(model, inputs, max_len=12,
                                             **kw),
                lambda **kw: generate.blockwise(model, inputs, k=4,
                                                max_len=12, **kw),
                lambda **kw: generate.blockwise(model, inputs, k=4,
                                                max_len=12, tree=tree,
                                                **kw)):
      plain = run()
      sharded = run(mesh=mesh)
      assert len(sharded.tokens.sharding.device_set) == 8
      np.testing.assert_array_equal(sharded.tokens, plain.tokens)
      np.testing.assert_array_equal(sharded.model_calls, plain.model_calls)


def test_a_tree_needs_no_more_positions_than_its_depth():
  """A tree's nodes take cache entries past the positions (node i of a
  call at the root's + i), not positions: at the model's last position a
  tree of 7 nodes and depth 2 decodes as k=3 does."""
  with jax.enable_x64(True):
    model = random_model(2, head_scale=0.0)  # max_target_len 64.
    inputs = random_inputs(2, 2)
    reference = generate.greedy(model, inputs, max_len=61)
    result = generate.blockwise(model, inputs, k=3, max_len=61,
                                tree=Tree.from_widths((2, 2), 2))
    assert_same_or_near_tie(model, inputs, reference, result)


def test_repeated_calls_do_not_recompile():
  model = random_model(0, dtype='float32')
  inputs = random_inputs(0, 2)
  generate.blockwise(model, inputs, k=3, max_len=8)
  size = generate.Decoder(model).compilations()
  other = random_model(1, dtype='float32')  # Same shapes, other weights.
  generate.blockwise(other, random_inputs(1, 2), k=3, max_len=8)
  assert generate.Decoder(other).compilations() == size


@pytest.fixture(scope='module')
def small_model():
  return random_model(0, dtype='float32')


@pytest.mark.parametrize('kwargs,message', [
    (dict(k=0), r'k=0 must be an integer in \[1, 10\]'),
    (dict(k=11), r'k=11 must be an integer in \[1, 10\]'),
    (dict(k=3, min_block=4), r'min_block=4 must be an integer in \[1, k=3\]'),
    (dict(k=3, min_block=0), r'min_block=0'),
    (dict(k=3, criterion=TopK(8)), 'top-k verification t=8 exceeds the '
     'vocabulary size 7'),
    (dict(k=3, max_len=0), 'max_len=0 must be an integer >= 1'),
    (dict(k=3, max_len=62), 'needs 65 decoder positions; the model has '
     'max_target_len=64'),
    (dict(k=4, tree=Tree.from_widths((2, 2), 2)), 'a tree of depth 2 '
     'verifies 3 tokens a call: k must be 3, not 4'),
    (dict(k=3, tree=Tree.from_widths((8,), 2)), 'top 8 tokens of a '
     'vocabulary of 7'),
    (dict(k=3, tree=Tree.chain(2), min_block=2), 'a tree has no one draft'),
    (dict(k=3, tree=Tree.from_widths((2,), 2),
          sampler=Sampler(temperature=1.0), criterion=Typical(0.3, 0.1)),
     'a tree under sampling is verified by the rejection rule'),
    (dict(k=3, tree=DynamicTree(size=4, depth=2, top=8)), 'top 8 tokens of '
     'a vocabulary of 7'),
    (dict(k=3, tree=Tree.chain(2), refinement=Refinement(drafts=2, top_t=2)),
     'a tree takes no refinement'),
    # Bools are not numbers: each was taken as 1.
    (dict(k=True), r'k=True must be an integer in \[1, 10\]'),
    (dict(k=3, max_len=True), 'max_len=True must be an integer >= 1'),
    (dict(k=3, sampler=Sampler(temperature=True)), 'temperature=True must be '
     'a finite number >= 0'),
    # A key JAX cannot take: no AttributeError or OverflowError.
    (dict(k=3, sampler=Sampler(1.0), key='abc'), "key='abc' is not an int "
     'seed or a jax.random.key'),
    (dict(k=3, sampler=Sampler(1.0), key=2**64), r'an int seed must be in '
     r'\[-2\*\*63, 2\*\*63\)'),
])
def test_bad_decoding_options(small_model, kwargs, message):
  kwargs = {'max_len': 8, **kwargs}
  with pytest.raises(ValueError, match=message):
    generate.blockwise(small_model, [[3, 4, 1]], **kwargs)


@pytest.mark.parametrize('iterations', [True, -1, 2**31, 1.0])
def test_bad_iteration_counts(small_model, iterations):
  with pytest.raises(ValueError, match=f'iterations={iterations!r} must be '
                     r'None .* or an integer in \[0, 2\*\*31\)'):
    generate.Decoder(small_model).decode(
        [[3, 4, 1]], DecodeOptions(max_len=4), iterations=iterations)


def test_bad_criteria():
  with pytest.raises(ValueError, match='t >= 1, got t=0'):
    TopK(0)
  with pytest.raises(ValueError, match='eps >= 0, got eps=-0.5'):
    Distance(-0.5)


@pytest.mark.parametrize('inputs,message', [
    ([[3, 4, 9]], r'token id 9 at inputs\[0, 2\] is outside the vocabulary '
     r'\[0, 7\)'),
    ([[3, -1]], r'token id -1 at inputs\[0, 1\]'),
    ([[3, 4], [0, 0]], 'example 1 of the inputs is empty'),
    ([[3, 0, 4]], 'example 0 has pad_id=0 before a token'),
    ([3, 4], r'must be \[batch, length\]'),
    (np.zeros((0, 3), int), r'must be \[batch, length\]'),
    ([[3.0, 4.0]], 'integer token ids'),
    ([list(range(2, 7)) * 4], 'an input of 20 tokens exceeds '
     'max_source_len=16'),
])
def test_bad_inputs(small_model, inputs, message):
  with pytest.raises(ValueError, match=message):
    generate.greedy(small_model, inputs, max_len=8)


def test_prompt_too_long_for_decoder_only():
  model = random_model(0, encoder_layers=0, dtype='float32')
  with pytest.raises(ValueError, match='after a prompt of 40 needs'):
    generate.blockwise(model, [[3] * 40], k=4, max_len=30)


def test_batch_not_divisible_by_mesh(small_model):
  mesh = jax.make_mesh((8,), ('data',),
                       axis_types=(jax.sharding.AxisType.Auto,))
  with pytest.raises(ValueError, match='batch size 3 is not divisible by '
                     "the 8 devices of mesh axis 'data'"):
    generate.greedy(small_model, [[3]] * 3, max_len=4, mesh=mesh)
  with pytest.raises(ValueError, match="batch_axis='rows' is not an axis of "
                     "the mesh {'data': 8}"):
    generate.Decoder(small_model, mesh=mesh, batch_axis='rows')


def test_decoder_equals_the_module_functions_without_recompiling():
  model = random_model(13, dtype='float32')
  inputs = random_inputs(13, 4)
  decoder = generate.Decoder(model)
  before = decoder.compilations()  # Other tests' models share the structure.
  result = decoder.blockwise(inputs, k=3, max_len=12)
  greedy = decoder.greedy(inputs, max_len=12)
  compiled = decoder.compilations()
  assert compiled - before <= 2
  # The module functions' one-off Decoders reuse the same two programs.
  np.testing.assert_array_equal(
      result.tokens, generate.blockwise(model, inputs, k=3,
                                        max_len=12).tokens)
  np.testing.assert_array_equal(
      greedy.tokens, generate.greedy(model, inputs, max_len=12).tokens)
  for _ in range(3):
    decoder.blockwise(inputs, k=3, max_len=12)
    decoder.greedy(inputs, max_len=12)
    generate.blockwise(model, inputs, k=3, max_len=12)
  # numpy integers are integers, and the same options.
  np.testing.assert_array_equal(
      decoder.blockwise(inputs, k=np.int64(3), max_len=np.int32(12)).tokens,
      result.tokens)
  assert decoder.compilations() == compiled


def test_decoder_on_a_mesh():
  model = random_model(14, dtype='float32')
  inputs = random_inputs(14, 8)
  mesh = sharding.make_mesh((8,), ('data',))
  decoder = generate.Decoder(model, mesh=mesh)
  result = decoder.blockwise(inputs, k=2, max_len=10)
  np.testing.assert_array_equal(
      result.tokens, generate.blockwise(model, inputs, k=2,
                                        max_len=10).tokens)
  with pytest.raises(ValueError, match='not divisible by the 8 devices'):
    decoder.greedy(inputs[:3], max_len=10)


# --- Draft refinement (Kim et al. 2024) through the Decoder.


def rescorers():
  """A trigram model and a tiny neural LM over the test vocabulary."""
  from bpd_jax.drafts import lm as lm_lib  # pylint: disable=g-import-not-at-top
  from bpd_jax.rescorers import ngram  # pylint: disable=g-import-not-at-top
  corpus = [list(row[row > 1]) for row in random_inputs(5, 40, length=8)]
  trigram = ngram.build(corpus, order=3, vocab_size=VOCAB, bos_id=2,
                        eos_id=1)
  return trigram, lm_lib.make(VOCAB, 4, d_model=16, layers=1)


@pytest.mark.parametrize('encoder_layers', [
    2, pytest.param(0, marks=pytest.mark.slow)])
def test_refinements_keep_the_greedy_output(encoder_layers):
  from bpd_jax.decoding import Refinement  # pylint: disable=g-import-not-at-top
  trigram, lm = rescorers()
  with jax.enable_x64(True):
    model = random_model(3, encoder_layers=encoder_layers, head_scale=0.3)
    decoder = generate.Decoder(model)
    inputs = random_inputs(4, 4)
    reference = decoder.greedy(inputs, max_len=20)
    plain = decoder.blockwise(inputs, k=4, max_len=20)
    for refinement, rescorer in [
        (Refinement(drafts=4, top_t=2), None),
        (Refinement(drafts=3, top_t=3, rescorer='ngram', weight=0.5),
         trigram),
        (Refinement(drafts=2, top_t=3, rescorer='neural', weight=0.5,
                    context=4), lm)]:
      result = decoder.blockwise(inputs, k=4, max_len=20,
                                 refinement=refinement, rescorer=rescorer)
      assert_same_or_near_tie(model, inputs, reference, result)
      # Each call verifies the heads' own draft or better ones: with p > 1
      # drafts including the best-scored path no fewer tokens per call.
      if refinement.rescorer == 'none':
        assert (result.model_calls <= plain.model_calls).all()


def test_bad_refinements(small_model):
  from bpd_jax.decoding import Refinement  # pylint: disable=g-import-not-at-top
  trigram, lm = rescorers()
  cases = [
      (dict(refinement=Refinement(drafts=9, top_t=2)),
       'drafts=9 exceeds the 2\\^3 = 8 drafts'),
      (dict(refinement=Refinement(top_t=8)), 'top_t=8 exceeds the '
       'vocabulary size 7'),
      (dict(refinement=Refinement(top_t=2, rescorer='ngram')),
       "'ngram' needs a rescorers.ngram.NgramModel"),
      (dict(refinement=Refinement(top_t=2, rescorer='neural', context=4),
            rescorer=small_model), "'neural' needs a decoder-only"),
      (dict(refinement=Refinement(top_t=2, rescorer='neural', context=9),
            rescorer=lm), 'window of 9 tokens exceeds'),
      (dict(rescorer=trigram), 'rescorer was given without a refinement'),
      (dict(k='auto', refinement=Refinement()), 'auto_k.AutoDecoder'),
  ]
  for kwargs, message in cases:
    kwargs = {'k': 4, 'max_len': 8, **kwargs}
    with pytest.raises(ValueError, match=message):
      generate.blockwise(small_model, [[3, 4, 1]], **kwargs)
  with pytest.raises(ValueError, match='drafts=0 must be an integer >= 1'):
    Refinement(drafts=0)
  with pytest.raises(ValueError, match="rescorer 'bigram' is not one of"):
    Refinement(rescorer='bigram')


@pytest.mark.parametrize('head_layer', [
    'sequential', pytest.param('autoregressive', marks=pytest.mark.slow)])
def test_refinement_is_refused_for_heads_that_read_each_other(head_layer):
  from bpd_jax.decoding import Refinement  # pylint: disable=g-import-not-at-top
  model = random_model(0, head_layer=head_layer, dtype='float32')
  with pytest.raises(ValueError, match=f"'{head_layer}' heads read each "
                     "other's proposals"):
    generate.blockwise(model, [[3, 4, 1]], k=4, max_len=8,
                       refinement=Refinement(drafts=2, top_t=2))
  # One draft without a rescorer is plain decoding, which these heads serve.
  plain = generate.blockwise(model, [[3, 4, 1]], k=4, max_len=8,
                             refinement=Refinement(drafts=1, top_t=1))
  np.testing.assert_array_equal(
      plain.tokens, generate.blockwise(model, [[3, 4, 1]], k=4,
                                       max_len=8).tokens)


# --- A checkpoint's own ids: no pad token (pad_id=-1), several end ids.

SPARE = 11  # A vocabulary id the inputs below never hold.


def own_ids_model(seed, encoder_layers, head_layer, architecture, pad_id):
  """A random model over 12 ids with stop ids 5 and 9 besides eos 1, every
  id (0 included) a token, padded with `pad_id`."""
  return random_model(seed, encoder_layers, head_layer, head_scale=0.0,
                      architecture=architecture, vocab_size=12,
                      stop_ids=(5, 9), pad_id=pad_id)


def own_ids_inputs(seed, batch, pad_id):
  """Right-padded inputs of different lengths, ids in [0, SPARE)."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, SPARE, (batch, 6))
  lengths = np.array([6, 1, 4, 2][:batch])
  return np.where(np.arange(6) < lengths[:, None], tokens, pad_id)


# Seeds whose outputs end at a stop id early and run long in others.
@pytest.mark.parametrize('seed,encoder_layers,head_layer,architecture', [
    pytest.param(4, 2, 'independent', 'paper', marks=pytest.mark.slow),
    (3, 0, 'sequential', 'paper'), (4, 0, 'autoregressive', 'llama')])
def test_pad_minus_one_and_stop_ids_blockwise_equals_greedy(
    seed, encoder_layers, head_layer, architecture):
  """Exact blockwise decoding (one draft and trees) is greedy's output
  when no vocabulary id pads and stop ids end examples as eos does; the
  padding is never read: greedy with a spare id as pad_id, on the same
  weights, decodes the same tokens."""
  with jax.enable_x64(True):
    model = own_ids_model(seed, encoder_layers, head_layer, architecture, -1)
    inputs = own_ids_inputs(seed, 4, -1)
    reference = generate.greedy(model, inputs, max_len=20)
    tokens, lengths = np.asarray(reference.tokens), np.asarray(
        reference.lengths)
    ends = tokens[np.arange(4), lengths - 1]
    stopped = np.isin(ends, (5, 9)) & (lengths < 20)
    assert stopped.any(), (ends, lengths)  # A stop id ended an example.
    for i, n in enumerate(lengths):
      assert not np.isin(tokens[i, :n - 1], (1, 5, 9)).any()  # The first.
      assert (tokens[i, n:] == -1).all()
    for tree in (None, Tree.from_widths((2, 2), 3)):
      result = generate.blockwise(model, inputs, k=4, max_len=20, tree=tree)
      assert_same_or_near_tie(model, inputs, reference, result)
      np.testing.assert_array_equal(result.lengths, lengths)
      assert float(result.mean_block_size) > 1.0
    spare = own_ids_model(seed, encoder_layers, head_layer, architecture, SPARE)
    same = jax.tree.map(np.array_equal, nnx.state(model, nnx.Param),
                              nnx.state(spare, nnx.Param))
    assert all(jax.tree.leaves(same))  # The same weights.
    padded = generate.greedy(spare, np.where(inputs < 0, SPARE, inputs),
                             max_len=20)
    np.testing.assert_array_equal(padded.lengths, lengths)
    np.testing.assert_array_equal(
        np.where(np.arange(20) < lengths[:, None], padded.tokens, -1),
        tokens)


@pytest.mark.parametrize('inputs,message', [
    ([[3, -2]], r'token id -2 at inputs\[0, 1\] is outside the vocabulary '
     r'\[0, 7\) \(padding: pad_id=-1\)'),
    ([[3, -1, 4]], 'example 0 has pad_id=-1 before a token'),
    ([[3, 4], [-1, -1]], 'example 1 of the inputs is empty'),
])
def test_bad_inputs_without_a_pad_token(inputs, message):
  model = random_model(0, dtype='float32', pad_id=-1)
  with pytest.raises(ValueError, match=message):
    generate.greedy(model, inputs, max_len=8)


def test_several_drafts_are_refused_with_local_attention():
  # Verified as a token tree, which local attention (image models) does
  # not serve: refused before anything is compiled.
  config = TransformerConfig.from_size(
      'tiny', vocab_size=30, num_proposal_heads=3, local_attention_block=4,
      num_encoder_layers=0)
  model = Transformer(config, rngs=nnx.Rngs(0))
  for kwargs in (dict(tree=Tree.from_spec('2', 2)),
                 dict(refinement=Refinement(drafts=2, top_t=2))):
    with pytest.raises(ValueError, match='local attention .* does not serve'):
      generate.blockwise(model, [[3, 4, 5]], k=3, max_len=4, **kwargs)
