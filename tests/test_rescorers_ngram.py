"""The Kneser-Ney n-gram model: normalised, equal to the formula, on device."""

import collections
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bpd_jax.infra import errors
from bpd_jax.rescorers import ngram

BOS, EOS, VOCAB = 2, 1, 9
CORPUS = [[4, 5, 6], [4, 5, 7, 5, 6], [6, 5, 4], [7, 7, 7], [5, 6], [4, 8]]


def all_queries(order):
  """Every context of order - 1 tokens, with every word: [C, V, n - 1], [C, V]."""
  contexts = np.array(list(itertools.product(range(VOCAB), repeat=order - 1)),
                      np.int32).reshape(VOCAB ** (order - 1), order - 1)
  words = np.broadcast_to(np.arange(VOCAB), (len(contexts), VOCAB))
  return (np.broadcast_to(contexts[:, None], (len(contexts), VOCAB,
                                              order - 1)), words)


@pytest.mark.parametrize('order', [1, 2, 3, 4])
def test_every_distribution_sums_to_one(order):
  model = ngram.build(CORPUS, order=order, vocab_size=VOCAB, bos_id=BOS,
                      eos_id=EOS)
  contexts, words = all_queries(order)
  log_p = ngram.log_prob(model, jnp.asarray(contexts), jnp.asarray(words))
  totals = np.exp(np.asarray(log_p, np.float64)).sum(axis=1)
  np.testing.assert_allclose(totals, 1.0, atol=1e-6)


def reference_kn(order):
  """Interpolated Kneser-Ney written straight from the counts (recursive)."""
  grams = collections.Counter()
  for sentence in CORPUS:
    padded = [BOS] * (order - 1) + sentence + [EOS]
    for i in range(order - 1, len(padded)):
      for n in range(1, order + 1):
        grams[tuple(padded[i - n + 1:i + 1])] += 1

  def count(gram):  # Raw at the top order or after bos, else continuation.
    if len(gram) == order or gram[0] == BOS:
      return grams[gram]
    return len({g[0] for g in grams if len(g) == len(gram) + 1
                and g[1:] == gram})

  def discount(n):
    values = [count(g) for g in grams if len(g) == n]
    n1, n2 = values.count(1), values.count(2)
    return n1 / (n1 + 2 * n2) if n1 and n2 else 0.5

  def prob(context, word):
    n = len(context) + 1
    d = discount(n)
    followers = {g[-1]: count(g) for g in grams
                 if len(g) == n and g[:-1] == context}
    total = sum(followers.values())
    lower = (prob(context[1:], word) if context else 1 / VOCAB)
    if not total:
      return lower
    return (max(followers.get(word, 0) - d, 0) / total
            + d * len(followers) / total * lower)
  return prob


@pytest.mark.parametrize('order', [2, 3])
def test_probabilities_match_the_counts(order):
  model = ngram.build(CORPUS, order=order, vocab_size=VOCAB, bos_id=BOS,
                      eos_id=EOS)
  prob = reference_kn(order)
  contexts, words = all_queries(order)
  got = np.exp(np.asarray(ngram.log_prob(model, jnp.asarray(contexts),
                                         jnp.asarray(words))))
  for i, context in enumerate(contexts[:, 0]):
    for w in range(VOCAB):
      assert got[i, w] == pytest.approx(prob(tuple(context), w), rel=1e-5)


def test_a_frequent_continuation_is_likelier():
  model = ngram.build(CORPUS, order=3, vocab_size=VOCAB, bos_id=BOS,
                      eos_id=EOS)
  # "4 5" is followed by 6 and 7 in the corpus, never by 8.
  log_p = ngram.log_prob(model, jnp.array([[4, 5]] * 3), jnp.array([6, 7, 8]))
  assert log_p[0] > log_p[2] and log_p[1] > log_p[2]


@pytest.mark.parametrize('order', [1, 2, 3, 4])
def test_the_greedy_continuation_is_the_argmax_of_every_context(order):
  model = ngram.build(CORPUS + [[3, 3, 8, 8, 8, 4]], order=order,
                      vocab_size=VOCAB, bos_id=BOS, eos_id=EOS)
  contexts, words = all_queries(order)
  log_p = np.asarray(ngram.log_prob(model, jnp.asarray(contexts),
                                    jnp.asarray(words)))
  token, found = ngram.next_token(model, jnp.asarray(contexts[:, 0]))
  token = np.asarray(token)
  chosen = log_p[np.arange(len(token)), token]
  # The argmax, or a tie with it (float32 log probabilities).
  np.testing.assert_allclose(chosen, log_p.max(axis=1), rtol=0, atol=1e-6)
  assert (token == log_p.argmax(axis=1)).mean() > 0.95
  # The longest context suffix seen: all of "4 5", "5" of "0 5", nothing
  # of "0 0".
  seen = dict(zip(map(tuple, contexts[:, 0].tolist()),
                  np.asarray(found).tolist()))
  if order == 3:
    assert seen[(4, 5)] == 2 and seen[(0, 5)] == 1 and seen[(0, 0)] == 0


def test_32k_vocabulary_jitted_and_saved(tmp_path):
  vocab = 32_000
  rng = np.random.default_rng(0)
  corpus = [list(rng.integers(3, vocab, 12)) for _ in range(200)]
  model = ngram.build(corpus, order=3, vocab_size=vocab, bos_id=BOS,
                      eos_id=EOS)
  assert model.nbytes() < 1e6  # No dense table beyond the unigrams.
  sentence = corpus[0]
  context = jnp.array([[sentence[0], sentence[1]], [BOS, BOS]])
  words = jnp.array([sentence[2], sentence[0]])
  log_p = jax.jit(ngram.log_prob)(model, context, words)
  unseen = ngram.log_prob(model, context, jnp.array([7, 7]))
  assert (log_p > unseen).all()
  model.save(tmp_path / 'lm.npz')
  loaded = ngram.NgramModel.load(tmp_path / 'lm.npz')
  np.testing.assert_array_equal(ngram.log_prob(loaded, context, words), log_p)
  # A file written before the greedy table gets it computed.
  with np.load(tmp_path / 'lm.npz') as data:
    np.savez(tmp_path / 'old.npz', **{
        name: data[name] for name in data.files
        if not name.startswith('context_best')})
  old = ngram.NgramModel.load(tmp_path / 'old.npz')
  np.testing.assert_array_equal(old.context_best_word,
                                model.context_best_word)


def test_bad_inputs_are_named():
  with pytest.raises(ValueError, match='order must be an integer >= 1'):
    ngram.build(CORPUS, order=0, vocab_size=VOCAB, bos_id=BOS, eos_id=EOS)
  with pytest.raises(ValueError, match='empty'):
    ngram.build([], order=2, vocab_size=VOCAB, bos_id=BOS, eos_id=EOS)
  with pytest.raises(ValueError, match='token id 12 is outside'):
    ngram.build([[12]], order=2, vocab_size=VOCAB, bos_id=BOS, eos_id=EOS)
  model = ngram.build(CORPUS, order=3, vocab_size=VOCAB, bos_id=BOS,
                      eos_id=EOS)
  with pytest.raises(ValueError, match='3-gram context has 2 tokens'):
    ngram.log_prob(model, jnp.zeros((1, 1), jnp.int32), jnp.zeros((1,),
                                                                 jnp.int32))


def _damaged(tmp_path, name, edit):
  """A model saved, then its arrays edited by `edit(dict)` and saved again."""
  good = tmp_path / 'good.npz'
  ngram.build([[5, 6, 7], [6, 7, 5]], order=3, vocab_size=10, bos_id=2,
              eos_id=1).save(good)
  with np.load(good) as data:
    arrays = dict(data)
  edit(arrays)
  path = tmp_path / name
  np.savez(path, **arrays)
  return path


@pytest.mark.parametrize('name, edit, message', [
    ('nan.npz', lambda a: a['entry_log_prob'].fill(np.nan),
     'entry_log_prob holds NaN or \\+inf log probabilities'),
    ('ids.npz', lambda a: a['entry_word'].fill(10),
     r'entry_word holds values outside \[0, 10\)'),
    ('short.npz', lambda a: a.update(context_word=a['context_word'][:-1]),
     'context_word has .* entries, not'),
    ('lacks.npz', lambda a: a.pop('entry_word'),
     r"it lacks the arrays \['entry_word'\]"),
])
def test_a_damaged_file_is_refused_naming_it(tmp_path, name, edit, message):
  path = _damaged(tmp_path, name, edit)
  with pytest.raises(errors.DataError, match=f'^{path} is not an n-gram model '
                     f'NgramModel.save wrote: {message}'):
    ngram.NgramModel.load(path)


def test_a_file_that_is_no_model_is_refused_naming_it(tmp_path):
  garbage = tmp_path / 'garbage.npz'
  garbage.write_bytes(b'garbage')
  one = tmp_path / 'one.npz'
  with open(one, 'wb') as f:
    np.save(f, np.zeros(3))
  for path in (garbage, one):
    with pytest.raises(errors.DataError) as raised:
      ngram.NgramModel.load(path)
    assert str(raised.value).startswith(f'{path} is not an n-gram model')
    assert '\n' not in str(raised.value)
