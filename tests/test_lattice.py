"""k-best Viterbi over the draft lattice equals enumerating every path."""

import itertools

import jax.numpy as jnp
import numpy as np
import pytest

from bpd_jax.decoding import lattice

VOCAB = 12
TABLE = np.random.default_rng(0).normal(size=(VOCAB,) * 3)


def trigram(context, word):  # c = 2: an arbitrary table, not normalised.
  return jnp.asarray(TABLE)[context[..., 0], context[..., 1], word]


def bigram(context, word):
  return jnp.asarray(TABLE)[0, context[..., 0], word]


def brute_force(tokens, head_scores, history, score, weight):
  """Every path's score, best first: [(score, tokens)]."""
  _, m, t = tokens.shape
  c = history.shape[1]
  ranked = []
  for choice in itertools.product(range(t), repeat=m):
    path = [int(tokens[0, j, choice[j]]) for j in range(m)]
    sequence = list(history[0]) + path
    total = 0.0
    for j in range(m):
      total += (1 - weight) * float(head_scores[0, j, choice[j]])
      if score is not None:
        total += weight * float(score(jnp.asarray(sequence[j:j + c]),
                                      jnp.asarray(path[j])))
    ranked.append((total, path))
  return sorted(ranked, key=lambda x: -x[0])


@pytest.mark.parametrize('m, t, c, p', [
    (3, 3, 2, 5), (1, 3, 2, 2), (3, 3, 0, 4),  # m < c too.
    *(pytest.param(*case, marks=pytest.mark.slow) for case in (
        (4, 2, 2, 16), (2, 4, 2, 3), (5, 2, 1, 7), (4, 3, 2, 1)))])
def test_best_paths_equal_enumeration(m, t, c, p):
  rng = np.random.default_rng(m * 100 + t * 10 + c)
  for _ in range(2):
    tokens = np.stack([rng.choice(VOCAB, t, replace=False)
                       for _ in range(m)])[None]
    head_scores = rng.normal(size=(1, m, t))
    history = rng.integers(0, VOCAB, (1, c))
    score = {2: trigram, 1: bigram, 0: None}[c]
    drafts, scores = lattice.best_paths(
        jnp.asarray(tokens), jnp.asarray(head_scores), jnp.asarray(history),
        p, score, 0.3)
    expected = brute_force(tokens, head_scores, history, score, 0.3)[:p]
    np.testing.assert_allclose(scores[0], [s for s, _ in expected],
                               rtol=1e-5, atol=1e-5)
    assert np.asarray(drafts[0]).tolist() == [d for _, d in expected]


def test_batch_rows_are_independent():
  rng = np.random.default_rng(1)
  tokens = jnp.asarray(rng.integers(0, VOCAB, (3, 3, 2)))
  scores = jnp.asarray(rng.normal(size=(3, 3, 2)))
  history = jnp.asarray(rng.integers(0, VOCAB, (3, 2)))
  together, _ = lattice.best_paths(tokens, scores, history, 4, trigram, 0.5)
  for i in range(3):
    alone, _ = lattice.best_paths(tokens[i:i + 1], scores[i:i + 1],
                                  history[i:i + 1], 4, trigram, 0.5)
    np.testing.assert_array_equal(together[i], alone[0])


def test_more_paths_than_the_lattice_has_is_an_error():
  tokens = jnp.zeros((1, 2, 2), jnp.int32)
  with pytest.raises(ValueError, match='2\\^2 = 4 paths'):
    lattice.best_paths(tokens, jnp.zeros((1, 2, 2)), jnp.zeros((1, 0)), 5)
