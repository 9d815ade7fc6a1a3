"""Sampling: the warping, and blockwise sampling has the base model's
distribution (exact probabilities against 20,000 samples, chi-square test),
which a wrong acceptance rule does not have."""

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats
from flax import nnx

from bpd_jax import decoding
from bpd_jax import generate
from bpd_jax.decoding import sampling
from bpd_jax.infra import sharding
from bpd_jax.models import Transformer, TransformerConfig

import llama_like
import repeating_drafters

VOCAB, MAX_LEN, SAMPLES = 8, 3, 20_000
SOURCE = np.array([[5, 6, 7, 1]])  # The encoder-decoder's input.
PROMPT = np.array([[5, 3]])  # The decoder-only model's.
# Each sampler's significance level: the chi-square test fails a correct
# rule with probability 1e-4 (the seeds are fixed, so a run either passes
# or fails; a wrong rule's p-values are below 1e-30).
ALPHA = 1e-4
SAMPLERS = [decoding.Sampler(1.0), decoding.Sampler(0.7, top_k=4),
            decoding.Sampler(1.3, top_p=0.8)]


def tiny_model(head_layer, seed=0, **overrides):
  """A random encoder-decoder over 8 tokens: its outputs spread over ~200
  sequences of 3 tokens, and its random heads' q differ from p.
  head_layer: a head layer, 'autoregressive:source=S' (the draft layer
  or the block drafter reading the source), 'block_corrected:recurrent'
  (its correction reading the corrected state before), or 'H@llama': heads H on a
  decoder-only model of
  the Llama family's pieces (tests/llama_like.py), sampled after PROMPT.
  overrides: further TransformerConfig fields. A random block drafter's
  proposals fall outside a cut p's support: it is moved towards
  proposing head 1's token (tests/repeating_drafters.py), so that the
  rule meets proposals p accepts (on the Llama-family base all the way:
  a fifth of its random weights left is enough for it to propose other
  tokens)."""
  head_layer, llama, _ = head_layer.partition('@llama')
  head_layer, _, option = head_layer.partition(':')
  source = option.partition('source=')[2]
  if option == 'recurrent':
    overrides = dict(overrides, correction_recurrent=True)
  fields = dict(num_heads=2, num_encoder_layers=1)
  if llama:
    fields = dict(num_encoder_layers=0, **llama_like.LLAMA)
  config = TransformerConfig.from_size(
      'tiny', vocab_size=VOCAB, d_model=16, d_ff=32, num_decoder_layers=1,
      num_proposal_heads=4, head_hidden=16, head_layer=head_layer,
      max_source_len=8, max_target_len=12, dropout_rate=0.0,
      draft_source=source or 'none', **fields, **overrides)
  model = Transformer(config, rngs=nnx.Rngs(seed))
  if head_layer in ('block', 'block_corrected'):
    repeating_drafters.scale_heads(model, 0 if llama else 0.2)
  return model


@nnx.jit
def teacher_forced_logits(model, source, decoder_input):
  """[batch, length, vocab] head 1's logits after each decoder input."""
  return model.next_token_logits(model(source, decoder_input))


def model_inputs(model) -> np.ndarray:
  """[1, length] what a decode of the model reads: the encoder-decoder's
  source, the decoder-only model's prompt."""
  return SOURCE if model.config.is_encoder_decoder else PROMPT


def exact_distribution(model, sampler) -> dict[tuple, float]:
  """P(output) under ancestral sampling, every output of MAX_LEN = 3
  tokens or fewer (ending at eos or a stop id), from full forward
  passes."""
  config = model.config
  prefixes = np.array(list(itertools.product(range(VOCAB), repeat=2)))
  count = len(prefixes)
  if config.is_encoder_decoder:
    source, start = jnp.repeat(SOURCE, count, axis=0), np.full(
        (count, 1), config.bos_id)
  else:  # The prompt is the decoder's first input.
    source, start = None, np.repeat(PROMPT, count, axis=0)
  decoder_input = np.concatenate([start, prefixes], axis=1)
  logits = teacher_forced_logits(model, source, decoder_input)
  logits = logits[:, start.shape[1] - 1:]  # After the start: 3 positions.
  p = np.exp(np.asarray(sampler.log_probs(logits), np.float64))  # [V*V,3,V]
  ends = (config.eos_id, *config.stop_ids)
  probabilities = {}
  for t1 in range(VOCAB):
    p1 = p[0, 0, t1]
    if t1 in ends:
      probabilities[(t1,)] = p1
      continue
    for t2 in range(VOCAB):
      row = t1 * VOCAB + t2
      p12 = p1 * p[row, 1, t2]
      if t2 in ends:
        probabilities[(t1, t2)] = p12
        continue
      for t3 in range(VOCAB):
        probabilities[(t1, t2, t3)] = p12 * p[row, 2, t3]
  total = sum(probabilities.values())
  assert abs(total - 1) < 1e-4, total
  return {outcome: q / total for outcome, q in probabilities.items()}


def outcomes(result) -> list[tuple]:
  tokens, lengths = np.asarray(result.tokens), np.asarray(result.lengths)
  return [tuple(row[:n]) for row, n in zip(tokens, lengths)]


def chi_square_p_value(samples: list[tuple], exact: dict) -> float:
  """The chi-square test's p-value of the samples against `exact`; outputs
  expected fewer than 5 times are pooled into one cell."""
  counts = {}
  for outcome in samples:
    counts[outcome] = counts.get(outcome, 0) + 1
  assert set(counts) <= set(exact), set(counts) - set(exact)
  n = len(samples)
  common = [o for o in exact if exact[o] * n >= 5]
  observed = [counts.get(o, 0) for o in common]
  expected = [exact[o] * n for o in common]
  rest_expected = n - sum(expected)
  if rest_expected > 0:
    observed.append(n - sum(observed))
    expected.append(rest_expected)
  return scipy.stats.chisquare(observed, expected).pvalue


def sample_many(model, sampler, k, key=0):
  source = np.repeat(model_inputs(model), SAMPLES, axis=0)
  if k == 1:
    return generate.sample(model, source, max_len=MAX_LEN, sampler=sampler,
                           key=key)
  return generate.blockwise(model, source, k=k, max_len=MAX_LEN,
                            sampler=sampler, key=key)


@pytest.mark.parametrize('k,head_layer', [
    (1, 'independent'),  # Ancestral sampling: the reference itself.
    # Every k and every head type by default; the rest of the grid is slow.
    # (Independent heads by default in the stop-id and wrong-rule tests,
    # joint ones at k=2; their other ks slow.)
    # (Sequential heads by default on the Llama-family base below.)
    (2, 'joint'), pytest.param(4, 'sequential', marks=pytest.mark.slow),
    pytest.param(3, 'independent', marks=pytest.mark.slow),
    pytest.param(4, 'joint', marks=pytest.mark.slow),
    (3, 'autoregressive'), (4, 'block:source=base'),
    # The draft layer's source changes its q, not the rule: slow.
    pytest.param(3, 'autoregressive:source=base', marks=pytest.mark.slow),
    pytest.param(3, 'block', marks=pytest.mark.slow),
    pytest.param(3, 'autoregressive:source=own', marks=pytest.mark.slow),
    pytest.param(2, 'independent', marks=pytest.mark.slow),
    pytest.param(3, 'sequential', marks=pytest.mark.slow),
    pytest.param(3, 'joint', marks=pytest.mark.slow),
    pytest.param(4, 'independent', marks=pytest.mark.slow),
    # On a Llama-family base: heads that read each other's proposals by
    # default, ancestral sampling and the paper's heads slow.
    (4, 'sequential@llama'),
    *(pytest.param(k, f'{layer}@llama', marks=pytest.mark.slow)
      for k, layer in ((1, 'independent'), (3, 'joint')))])
def test_samples_have_the_base_models_distribution(k, head_layer):
  model = tiny_model(head_layer)
  for index, sampler in enumerate(SAMPLERS):
    result = sample_many(model, sampler, k, key=index)
    p_value = chi_square_p_value(outcomes(result),
                                 exact_distribution(model, sampler))
    assert p_value > ALPHA, (sampler, p_value)
    if k > 1:  # The rule accepted proposals: fewer calls than tokens.
      assert float(result.mean_block_size) > 1.05, sampler


@pytest.mark.parametrize('head_layer', ['independent', 'sequential'])
def test_samples_drafted_from_a_drafting_vocabulary_keep_the_distribution(
    head_layer):
  """Proposals drawn from q over a drafting vocabulary (zero elsewhere):
  the rejection rule still gives the base model's distribution, which puts
  mass on the ids the drafts never propose."""
  model = tiny_model(head_layer)
  sampler = SAMPLERS[0]
  source = np.repeat(model_inputs(model), SAMPLES, axis=0)
  result = generate.blockwise(model, source, k=3, max_len=MAX_LEN,
                              sampler=sampler, key=5,
                              draft_vocab=[1, 3, 4, 6])
  samples = outcomes(result)
  assert any(set(s) & {0, 2, 5, 7} for s in samples)
  p_value = chi_square_p_value(samples, exact_distribution(model, sampler))
  assert p_value > ALPHA, p_value
  assert float(result.mean_block_size) > 1.05


def test_samples_ending_at_stop_ids_have_the_base_models_distribution():
  # Without a pad token (-1 fills the outputs) and with two stop ids
  # beside eos: the outputs that end at them are cut as ancestral
  # sampling cuts them.
  model = tiny_model('independent', pad_id=-1, stop_ids=(0, 4))
  for index, sampler in enumerate(SAMPLERS):
    result = sample_many(model, sampler, 3, key=index)
    samples = outcomes(result)
    assert any(s[-1] in (0, 4) and len(s) < MAX_LEN for s in samples)
    tokens, lengths = np.asarray(result.tokens), np.asarray(result.lengths)
    assert (tokens[np.arange(MAX_LEN) >= lengths[:, None]] == -1).all()
    p_value = chi_square_p_value(samples, exact_distribution(model, sampler))
    assert p_value > ALPHA, (sampler, p_value)
    assert float(result.mean_block_size) > 1.05, sampler


def test_a_wrong_acceptance_rule_fails_the_same_test(monkeypatch):
  # Accept a proposal when it equals a token drawn from p (the rest of the
  # rule unchanged): a plausible rule whose output is not p's.
  def equals_a_draw_from_p(log_p_x, log_q_x, uniform):
    del log_q_x
    return uniform < jnp.exp(log_p_x)  # P(x == draw) = p(x)

  assert p_value_of_a_wrong_rule(monkeypatch, 'accepted_proposals',
                                 equals_a_draw_from_p, 'independent',
                                 SAMPLERS[0]) < 1e-10


def p_value_of_a_wrong_rule(monkeypatch, name, replacement, head_layer,
                            sampler):
  """The chi-square p-value of samples drawn with sampling.NAME replaced."""
  model = tiny_model(head_layer)
  exact = exact_distribution(model, sampler)
  jax.clear_caches()  # Compiled decodes hold the real rule.
  monkeypatch.setattr(sampling, name, replacement)
  try:
    return chi_square_p_value(outcomes(sample_many(model, sampler, 3)),
                              exact)
  finally:
    monkeypatch.undo()
    jax.clear_caches()


@pytest.mark.parametrize('k,head_layer', [
    (3, 'block'),
    pytest.param(3, 'sequential', marks=pytest.mark.slow),
    pytest.param(4, 'independent', marks=pytest.mark.slow),
    pytest.param(3, 'autoregressive:source=base', marks=pytest.mark.slow),
    pytest.param(4, 'block@llama', marks=pytest.mark.slow)])
def test_argmax_proposals_have_the_base_models_distribution(k, head_layer):
  """The drafter's most likely tokens as proposals (a point-mass q: each
  accepted with probability p(x), the residual p without it)."""
  model = tiny_model(head_layer)
  for index, sampler in enumerate(SAMPLERS):
    sampler = dataclasses.replace(sampler, proposals='argmax')
    result = sample_many(model, sampler, k, key=10 + index)
    p_value = chi_square_p_value(outcomes(result),
                                 exact_distribution(model, sampler))
    assert p_value > ALPHA, (sampler, p_value)
    assert float(result.mean_block_size) > 1.01, sampler


def test_argmax_proposals_with_the_drafters_q_fail_the_test(monkeypatch):
  # Argmax proposals verified as if drawn from the drafter's q (the
  # point mass forgotten): they are over-accepted.
  drafters_q = lambda sampler, proposals, logits: sampler.log_probs(logits)
  assert p_value_of_a_wrong_rule(
      monkeypatch, 'proposal_log_q', drafters_q, 'block',
      decoding.Sampler(1.0, proposals='argmax')) < 1e-10


def test_same_key_same_samples_and_an_example_alone_samples_the_same():
  model = tiny_model('independent')
  sources = np.array([[5, 6, 7, 1], [3, 4, 1, 0], [6, 1, 0, 0]])
  keys = jax.random.split(jax.random.key(7), 3)
  sampler = decoding.Sampler(0.9, top_p=0.95)
  # Blockwise (ancestral sampling runs the same loop with k = 1).
  run = lambda inputs, keys: generate.blockwise(
      model, inputs, k=3, max_len=6, sampler=sampler, key=keys)
  batch = run(sources, keys)
  np.testing.assert_array_equal(batch.tokens, run(sources, keys).tokens)
  for i in range(3):
    alone = run(sources[i:i + 1], keys[i:i + 1])
    np.testing.assert_array_equal(alone.tokens[0], batch.tokens[i])
    assert int(alone.model_calls[0]) == int(batch.model_calls[i])
  other = run(sources, jax.random.split(jax.random.key(8), 3))
  assert not np.array_equal(other.tokens, batch.tokens)


def test_sharded_equals_unsharded():
  model = tiny_model('joint')
  sources = np.repeat(SOURCE, 8, axis=0)
  sampler = decoding.Sampler(1.0, top_k=5)
  mesh = sharding.make_mesh((8,), ('data',))
  kwargs = dict(k=4, max_len=5, sampler=sampler, key=11)
  plain = generate.blockwise(model, sources, **kwargs)
  sharded = generate.blockwise(model, sources, mesh=mesh, **kwargs)
  np.testing.assert_array_equal(plain.tokens, sharded.tokens)


def test_temperature_zero_is_greedy_and_exact_blockwise():
  model = tiny_model('independent')
  sources = np.array([[5, 6, 7, 1], [3, 4, 1, 0]])
  greedy = generate.greedy(model, sources, max_len=6)
  zero = decoding.Sampler(0.0)
  np.testing.assert_array_equal(generate.sample(
      model, sources, max_len=6, sampler=zero).tokens, greedy.tokens)
  blockwise = generate.blockwise(model, sources, k=3, max_len=6,
                                 sampler=decoding.Sampler.from_spec('greedy'))
  np.testing.assert_array_equal(blockwise.tokens, greedy.tokens)


def test_typical_acceptance_accepts_likely_proposals():
  criterion = decoding.Typical(eps=0.3, delta=0.09)
  # A peaked and a flat distribution over 4 tokens.
  logits = jnp.log(jnp.array([[0.9, 0.05, 0.03, 0.02],
                              [0.25, 0.25, 0.25, 0.25]]))
  passes = lambda token: np.asarray(criterion.accepts(
      jnp.array([token, token]), logits))
  # Peaked: threshold min(0.3, 0.09 e^-H) = 0.09 * e^-0.43 = 0.058.
  np.testing.assert_array_equal(passes(0), [True, True])
  np.testing.assert_array_equal(passes(1), [False, True])  # Flat: 0.0225.
  # Typical acceptance decodes (approximately) with sampling.
  model = tiny_model('independent')
  result = generate.blockwise(model, np.repeat(SOURCE, 4, axis=0), k=4,
                              max_len=6, sampler=decoding.Sampler(1.0),
                              criterion=criterion, key=1)
  assert result.tokens.shape == (4, 6)


# One program for every sampler: its numbers are traced.
_log_probs = jax.jit(lambda sampler, logits: sampler.log_probs(logits))


def probs_of(sampler, logits):
  return np.exp(np.asarray(_log_probs(sampler, jnp.asarray(logits,
                                                           jnp.float32))))


def reference_warp(scaled, top_k, top_p):
  """The cuts by sorting, in float64."""
  order = np.argsort(-scaled)
  keep = np.zeros(len(scaled), bool)
  keep[order[:top_k]] = True
  p = np.where(keep, np.exp(scaled - scaled.max()), 0.0)
  p /= p.sum()
  ranked = p[order]
  before = np.cumsum(ranked) - ranked
  nucleus = np.zeros(len(p), bool)
  nucleus[order[before < top_p]] = True
  p = np.where(nucleus & keep, p, 0.0)
  return p / p.sum()


def test_warping():
  logits = jnp.log(jnp.array([0.5, 0.2, 0.15, 0.1, 0.05]))
  probs = lambda sampler: probs_of(sampler, logits)
  np.testing.assert_allclose(probs(decoding.Sampler(1.0)),
                             [0.5, 0.2, 0.15, 0.1, 0.05], rtol=1e-5)
  np.testing.assert_allclose(probs(decoding.Sampler(1.0, top_k=2)),
                             [5 / 7, 2 / 7, 0, 0, 0], rtol=1e-5)
  # Top-p 0.8: 0.5 + 0.2 < 0.8, so 0.15 is kept too.
  np.testing.assert_allclose(probs(decoding.Sampler(1.0, top_p=0.8)),
                             np.array([0.5, 0.2, 0.15, 0, 0]) / 0.85,
                             rtol=1e-5)
  np.testing.assert_allclose(probs(decoding.Sampler(1.0, top_p=0.69)),
                             np.array([0.5, 0.2, 0, 0, 0]) / 0.7, rtol=1e-5)
  np.testing.assert_allclose(probs(decoding.Sampler(1.0, top_p=0.4)),
                             [1, 0, 0, 0, 0], rtol=1e-5)
  # Both cuts, and ties at the k-th value kept.
  np.testing.assert_allclose(
      probs(decoding.Sampler(1.0, top_k=3, top_p=0.9)),
      np.array([0.5, 0.2, 0.15, 0, 0]) / 0.85, rtol=1e-5)
  tied = probs_of(decoding.Sampler(1.0, top_k=2),
                  np.log([0.4, 0.2, 0.2, 0.2]))
  np.testing.assert_allclose(tied, [0.4, 0.2, 0.2, 0.2], rtol=1e-5)
  # Agrees with a sort-based reference on random logits.
  rng = np.random.default_rng(0)
  for _ in range(20):
    random_logits = rng.normal(size=50) * 3
    top_k, top_p = int(rng.integers(1, 50)), float(rng.uniform(0.05, 1))
    got = probs_of(decoding.Sampler(0.8, top_k=top_k, top_p=top_p),
                   random_logits)
    np.testing.assert_allclose(got, reference_warp(random_logits / 0.8,
                                                   top_k, top_p), atol=1e-5)
  hot = probs(decoding.Sampler(2.0))
  np.testing.assert_allclose(hot, np.sqrt([0.5, 0.2, 0.15, 0.1, 0.05])
                             / np.sqrt([0.5, 0.2, 0.15, 0.1, 0.05]).sum(),
                             rtol=1e-5)


def test_specs_round_trip():
  for spec in ('greedy', 'temperature=0.7', 'temperature=1,top_k=40',
               'temperature=0.8,top_k=5,top_p=0.9'):
    assert decoding.Sampler.from_spec(spec).spec == spec


@pytest.mark.parametrize('sampler,options,message', [
    (decoding.Sampler(-1.0), {}, r'temperature=-1\.0 must be'),
    (decoding.Sampler(1.0, top_p=0.0), {}, r'top_p=0\.0 must be in \(0, 1\]'),
    (decoding.Sampler(1.0, top_p=1.5), {}, r'top_p=1\.5'),
    (decoding.Sampler(1.0, top_k=-1), {}, r'top_k=-1 must be an integer in '
     r'\[0, 8\]'),
    (decoding.Sampler(1.0, top_k=9), {}, r'top_k=9'),
    (decoding.Sampler(1.0), dict(k=3, criterion=decoding.TopK(2)),
     "not 'top-k:2'"),
    (decoding.Sampler(1.0), dict(k=3, min_block=2), 'min_block=1, not 2'),
    (decoding.Sampler(1.0), dict(criterion=decoding.Typical(0.3, 0.09)),
     r'ancestral sampling \(k=1\) takes no criterion'),
    # Bools are not numbers here: True would be taken as 1.
    (decoding.Sampler(True), {}, r'temperature=True must be a finite number'),
    (decoding.Sampler(float('inf')), {}, r'temperature=inf must be a finite'),
    (decoding.Sampler(1.0, top_k=True), {}, r'top_k=True must be an integer'),
    (decoding.Sampler(1.0, top_p=True), {}, r'top_p=True must be in'),
    (decoding.Sampler('0.7'), {}, r"temperature='0.7' must be a finite"),
])
def test_bad_sampling_options(sampler, options, message):
  with pytest.raises(ValueError, match=message):
    decoding.DecodeOptions(max_len=4, sampler=sampler, **options).check(
        num_heads=4, vocab_size=VOCAB)


def test_bad_specs_and_keys():
  with pytest.raises(ValueError, match="'warmth=2' is not one of temperature="):
    decoding.Sampler.from_spec('warmth=2')
  with pytest.raises(ValueError, match="top_k='x' is not an integer"):
    decoding.Sampler.from_spec('top_k=x')
  with pytest.raises(ValueError, match="sampler 'temperature=1,temperature=2'"
                     ": temperature= is given twice"):
    decoding.Sampler.from_spec('temperature=1,temperature=2')
  with pytest.raises(ValueError, match=r'typical acceptance needs 0 < eps'):
    decoding.Typical(0.0, 0.1)
  with pytest.raises(ValueError, match=r'keys of shape \(2,\) do not match '
                     r'a batch of 3'):
    sampling.example_keys(jax.random.split(jax.random.key(0), 2), 3)


@pytest.mark.parametrize('key,message', [
    ('abc', "key='abc' is not an int seed or a jax.random.key"),
    ([1, 2], r'key=\[1, 2\] is not an int seed'),
    (True, 'key=True is not an int seed'),
    (2**64, r'key=18446744073709551616: an int seed must be in \[-2\*\*63, '
     r'2\*\*63\)'),
    (jax.random.PRNGKey(0), 'is not an int seed or a jax.random.key'),
])
def test_bad_keys_are_one_value_error(key, message):
  with pytest.raises(ValueError, match=message):
    sampling.example_keys(key, 2)


def test_numpy_integer_seeds_are_seeds():
  np.testing.assert_array_equal(
      jax.random.key_data(sampling.example_keys(np.int64(5), 2)),
      jax.random.key_data(sampling.example_keys(5, 2)))


@pytest.mark.parametrize('drafter', [
    # Lookup proposals beside the heads' draft by default (point masses
    # and drawn drafts in one tree); alone and as a fallback, slow.
    'lookup:min=1,heads=tree',
    pytest.param('lookup:min=1', marks=pytest.mark.slow),
    pytest.param('lookup:min=1,heads=fallback', marks=pytest.mark.slow)])
def test_lookup_proposals_have_the_base_models_distribution(drafter):
  """Prompt lookup's proposals are fixed by the output so far: point
  masses, accepted with probability p(x); a slot with nothing proposed is
  no rejection (the token there is drawn from p itself). Beside the
  heads' drawn draft as one tree (heads=tree), each node keeps its own q."""
  assert_samples_keep_the_distribution(tiny_model('independent'), SAMPLERS,
                                       k=3, drafter=drafter)


def assert_samples_keep_the_distribution(model, samplers, k, **decode):
  """Blockwise sampling with each sampler (keys 20, 21, ...) passes the
  chi-square test and accepts proposals; `decode`: further arguments of
  generate.blockwise (a drafter, a tree)."""
  source = np.repeat(model_inputs(model), SAMPLES, axis=0)
  for index, sampler in enumerate(samplers):
    result = generate.blockwise(model, source, k=k, max_len=MAX_LEN,
                                sampler=sampler, key=20 + index, **decode)
    p_value = chi_square_p_value(outcomes(result),
                                 exact_distribution(model, sampler))
    assert p_value > ALPHA, (sampler, p_value)
    assert float(result.mean_block_size) > 1.05, sampler


def test_lookup_proposals_taken_for_draws_from_a_flat_q_fail_the_test(
    monkeypatch):
  # The point mass forgotten: a proposal accepted with p(x) * vocab.
  flat = lambda tokens, vocab_size: jnp.full(tokens.shape + (vocab_size,),
                                             -np.log(vocab_size))
  model = tiny_model('independent')
  sampler = SAMPLERS[0]
  exact = exact_distribution(model, sampler)
  jax.clear_caches()  # Compiled decodes hold the real rule.
  monkeypatch.setattr(sampling, 'point_mass', flat)
  try:
    result = generate.blockwise(
        model, np.repeat(model_inputs(model), SAMPLES, axis=0), k=3,
        max_len=MAX_LEN, sampler=sampler, drafter='lookup:min=1')
    assert chi_square_p_value(outcomes(result), exact) < 1e-10
  finally:
    monkeypatch.undo()
    jax.clear_caches()


# --- Trees of drafts under sampling (recursive rejection sampling).

TREES = {'2': (2,), '3,2': (3, 2), '2,1,2': (2, 1, 2)}


@pytest.mark.parametrize('k,head_layer,widths,proposals', [
    # Every drafter and tree shape once: one-pass (independent, block)
    # and dependent (sequential, the draft layer, the corrected block
    # drafter) drafters, drawn and argmax proposals.
    # (One-pass heads' trees by default in the lookup tree and wrong-rule
    # tests; a dependent drafter's drawn children by default in the dynamic
    # tree's test below.)
    pytest.param(3, 'independent', '3,2', 'draw', marks=pytest.mark.slow),
    pytest.param(4, 'autoregressive', '2,1,2', 'draw',
                 marks=pytest.mark.slow),
    (3, 'sequential@llama', '2', 'argmax'),
    pytest.param(3, 'block', '3,2', 'argmax', marks=pytest.mark.slow),
    pytest.param(4, 'sequential', '2,1,2', 'draw', marks=pytest.mark.slow),
    pytest.param(3, 'block_corrected', '3,2', 'draw',
                 marks=pytest.mark.slow),
    (3, 'block_corrected:recurrent', '3,2', 'draw'),
    pytest.param(3, 'joint', '2', 'draw', marks=pytest.mark.slow)])
def test_samples_over_a_tree_have_the_base_models_distribution(
    k, head_layer, widths, proposals):
  assert_samples_keep_the_distribution(
      tiny_model(head_layer),
      [dataclasses.replace(sampler, proposals=proposals)
       for sampler in SAMPLERS[:2]],
      k=k, tree=decoding.Tree.from_widths(TREES[widths][:k - 1], k - 1))


@pytest.mark.parametrize('k,head_layer,proposals', [
    # A dependent drafter's draws by default; a one-pass drafter's, and
    # argmax proposals (point masses), slow.
    (4, 'autoregressive', 'draw'),
    pytest.param(4, 'independent', 'draw', marks=pytest.mark.slow),
    pytest.param(4, 'sequential', 'argmax', marks=pytest.mark.slow)])
def test_samples_over_a_dynamic_tree_have_the_base_models_distribution(
    k, head_layer, proposals):
  # The rerank keeps 5 of the 15 nodes drafted, two nodes expanded a
  # level: a prefix of each node's draws, chosen before they are drawn.
  # (One sampler: the static trees' test warps with two.)
  assert_samples_keep_the_distribution(
      tiny_model(head_layer),
      [dataclasses.replace(SAMPLERS[0], proposals=proposals)],
      k=k, tree=decoding.DynamicTree(6, k - 1, top=3, frontier=2))


@pytest.mark.slow  # A wrong tree rule fails by default below.
def test_a_dynamic_tree_that_keeps_its_most_likely_draws_fails(
    monkeypatch):
  # EAGLE-2's rerank taken over to draws as it is: a node's draws ranked
  # by their own probability, so the likeliest are kept and tried first:
  # the tried draws are no longer draws from q without the earlier ones.
  from bpd_jax.decoding import tree_sampling  # pylint: disable=g-import-not-at-top
  draw_children = tree_sampling.draw_children

  def likeliest_first(keys, log_q, count):
    tokens, drawn = draw_children(keys, log_q, count)
    order = jnp.argsort(-jnp.take_along_axis(log_q, tokens, axis=-1),
                        axis=-1)
    return (jnp.take_along_axis(tokens, order, axis=-1),
            jnp.take_along_axis(drawn, order, axis=-1))

  assert_a_wrong_tree_rule_fails(
      monkeypatch, tiny_model('autoregressive'),
      (tree_sampling, 'draw_children', likeliest_first),
      decoding.DynamicTree(3, 2, top=4, frontier=1))


def test_a_tree_whose_siblings_are_taken_for_independent_draws_fails(
    monkeypatch):
  # Siblings drawn without replacement, each verified against the whole
  # q (as if drawn with replacement): the later ones are over-accepted.
  from bpd_jax.decoding import tree_sampling  # pylint: disable=g-import-not-at-top
  assert_a_wrong_tree_rule_fails(
      monkeypatch, tiny_model('independent'),
      (tree_sampling, '_sibling_log_q', lambda log_q, removed: (
          log_q, jnp.ones(log_q.shape[:1], bool))),
      decoding.Tree.from_widths((4, 4), 2))


def assert_a_wrong_tree_rule_fails(monkeypatch, model, patch, tree):
  """With `patch` (module, name, wrong value) in place, sampling over
  `tree` (k = its depth + 1, the first sampler) fails the chi-square
  test."""
  sampler = SAMPLERS[0]
  exact = exact_distribution(model, sampler)
  jax.clear_caches()  # Compiled decodes hold the real rule.
  monkeypatch.setattr(*patch)
  try:
    source = np.repeat(model_inputs(model), SAMPLES, axis=0)
    result = generate.blockwise(model, source, k=tree.depth + 1,
                                max_len=MAX_LEN, sampler=sampler, key=20,
                                tree=tree)
    assert chi_square_p_value(outcomes(result), exact) < 1e-10
  finally:
    monkeypatch.undo()
    jax.clear_caches()
