"""Sampling over a token tree keeps the base distribution: the first two
output tokens of 20,000 verified trees against their exact probabilities
(chi-square test), which wrong rules do not pass; drafts without
replacement have their law."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from bpd_jax.decoding import tree as tree_lib
from bpd_jax.decoding import tree_sampling
from bpd_jax.decoding.sampling import point_mass

SAMPLES = 20_000
# A correct rule fails with probability 1e-3 (the seeds are fixed: a run
# passes or fails); the wrong rules' p-values are far below WRONG.
ALPHA, WRONG = 1e-3, 1e-6
ROOT = 0  # The root's token: p after it is P[ROOT].
# P[t]: the base distribution of the token after token t (so p at a node
# depends on its token); Q[t]: the drafter's, unlike P.
P = np.array([[0.10, 0.20, 0.30, 0.40],
              [0.40, 0.30, 0.20, 0.10],
              [0.25, 0.25, 0.40, 0.10],
              [0.05, 0.15, 0.50, 0.30]])
Q = np.array([[0.40, 0.30, 0.20, 0.10],
              [0.10, 0.10, 0.40, 0.40],
              [0.10, 0.60, 0.30, 0.00],
              [0.30, 0.30, 0.20, 0.20]])
# Fewer positive tokens than children: the root's 3rd draw and some
# second draws at depth 2 are undrawn slots.
SPARSE_Q = np.array([[0.70, 0.00, 0.30, 0.00],
                     [0.00, 0.00, 1.00, 0.00],
                     [0.10, 0.60, 0.30, 0.00],
                     [0.50, 0.00, 0.00, 0.50]])


def log(probabilities):
  with np.errstate(divide='ignore'):
    return jnp.asarray(np.log(probabilities), jnp.float32)


def sampled_tree(key, widths, q=Q, invalid=(), point_masses=False):
  """A batch of SAMPLES trees: the root, widths[0] children, each with
  widths[1] children (if given), drawn from q without replacement (or q's
  top tokens as point masses); nodes level by level, siblings in draw
  order. Returns (TreeBlock, log_p [batch, N, V], log_q [batch, N, V])."""
  keys = jax.random.split(key, (len(widths), SAMPLES))
  log_q_table = log(q)
  parent_tokens = jnp.full((SAMPLES, 1), ROOT, jnp.int32)
  parent_valid = jnp.ones((SAMPLES, 1), bool)
  tokens, valid, parents, depths = [parent_tokens], [parent_valid], [0], [0]
  above = [0]  # The nodes of the level above.
  for level, width in enumerate(widths):
    if point_masses:
      ranked = jnp.argsort(-log_q_table[parent_tokens], axis=-1)
      drawn_tokens = ranked[..., :width].astype(jnp.int32)
      drawn = jnp.ones(drawn_tokens.shape, bool)
    else:
      drawn_tokens, drawn = tree_sampling.draw_children(
          keys[level], log_q_table[parent_tokens], width)
    # A child of an undrawn slot is no node either.
    drawn = drawn & parent_valid[..., None]
    parent_tokens = drawn_tokens.reshape(SAMPLES, -1)
    parent_valid = drawn.reshape(SAMPLES, -1)
    tokens.append(parent_tokens)
    valid.append(parent_valid)
    parents += [node for node in above for _ in range(width)]
    above = list(range(len(depths), len(depths) + len(above) * width))
    depths += [level + 1] * len(above)
  tokens = jnp.concatenate(tokens, axis=1)
  valid = jnp.concatenate(valid, axis=1).at[:, list(invalid)].set(False)
  parents = jnp.broadcast_to(jnp.asarray(parents, jnp.int32), tokens.shape)
  depths = jnp.broadcast_to(jnp.asarray(depths, jnp.int32), tokens.shape)
  tree = tree_lib.TreeBlock(
      tokens=tokens, parents=parents, depths=depths, valid=valid,
      ancestors=tree_lib.ancestor_matrix(parents, len(widths)))
  log_p = log(P)[tokens]
  if point_masses:
    log_q = point_mass(tokens, P.shape[1])
  else:
    log_q = log_q_table[jnp.take_along_axis(tokens, parents, axis=1)]
  return tree, log_p, log_q


def first_two_tokens(key, tree, accepted, path, token):
  """[batch, 2] the output's first two tokens: the accepted path's, the
  drawn token, then (after no accepted node) a token drawn from P after
  it, as the next call would."""
  path_tokens = jnp.take_along_axis(tree.tokens, path, axis=1)
  path_tokens = jnp.pad(path_tokens, ((0, 0), (0, 1)))  # Depth 1: a 3rd.
  extra = jax.random.categorical(key, log(P)[token])
  first, second = (
      jnp.where(i < accepted, path_tokens[:, i + 1],
                jnp.where(i == accepted, token, extra)) for i in (0, 1))
  return np.stack([first, second], axis=1)


def p_value(case, seed=0) -> tuple[float, float]:
  """(the chi-square test's p-value of `case`'s first two output tokens
  against P(a, b) = P[ROOT, a] P[a, b]; the share of trees with a node
  accepted)."""
  widths = case['widths']
  tree_key, verify_key, extra_key = jax.random.split(jax.random.key(seed), 3)
  tree, log_p, log_q = sampled_tree(tree_key, **case)
  _, accepted, path, token = tree_sampling.verify(
      jax.random.split(verify_key, SAMPLES), tree, log_p, log_q, len(widths))
  outputs = first_two_tokens(extra_key, tree, accepted, path, token)
  vocab = P.shape[1]
  observed = np.bincount(outputs[:, 0] * vocab + outputs[:, 1],
                         minlength=vocab * vocab)
  expected = (P[ROOT][:, None] * P).reshape(-1) * SAMPLES
  return (scipy.stats.chisquare(observed, expected).pvalue,
          float(np.mean(accepted >= 1)))


CASES = {
    'root with 3 children': dict(widths=(3,)),
    '2 children with 2 each': dict(widths=(2, 2)),
    'chain': dict(widths=(1, 1)),
    'an invalid node': dict(widths=(2, 2), invalid=(4,)),
    'undrawn slots': dict(widths=(3, 2), q=SPARSE_Q),
    'point masses': dict(widths=(2, 2), point_masses=True),
}


@pytest.mark.parametrize('name', CASES)
def test_the_output_has_the_base_distribution(name):
  value, accepting = p_value(CASES[name])
  assert value > ALPHA, (name, value)
  assert accepting > 0.2, name  # The rule is exercised.


@pytest.mark.parametrize('name', ['root with 3 children',
                                  '2 children with 2 each'])
def test_siblings_verified_against_the_full_q_lose_it(name, monkeypatch):
  # Each sibling tested against q itself, as if drawn with replacement.
  sibling_log_q = tree_sampling._sibling_log_q
  monkeypatch.setattr(tree_sampling, '_sibling_log_q',
                      lambda log_q, removed: sibling_log_q(
                          log_q, jnp.zeros_like(removed)))
  assert p_value(CASES[name])[0] < WRONG, name


def test_point_masses_without_the_residual_lose_it(monkeypatch):
  # After a rejected point mass the target stays p, its token included.
  monkeypatch.setattr(tree_sampling, 'residual_log_probs',
                      lambda log_p, log_q: log_p)
  assert p_value(CASES['point masses'])[0] < WRONG


def test_children_are_drawn_without_replacement_with_their_law():
  q = np.array([0.5, 0.3, 0.15, 0.05, 0.0])
  keys = jax.random.split(jax.random.key(1), SAMPLES)
  tokens, drawn = tree_sampling.draw_children(
      keys, jnp.broadcast_to(log(q), (SAMPLES, 1, 5)), 2)
  assert tokens.shape == drawn.shape == (SAMPLES, 1, 2)
  assert tokens.dtype == jnp.int32 and bool(drawn.all())
  first, second = np.asarray(tokens[:, 0, 0]), np.asarray(tokens[:, 0, 1])
  assert not np.any(first == second)
  pairs = [(a, b) for a in range(4) for b in range(4) if a != b]
  observed = [np.sum((first == a) & (second == b)) for a, b in pairs]
  expected = [q[a] * q[b] / (1 - q[a]) * SAMPLES for a, b in pairs]
  assert scipy.stats.chisquare(observed, expected).pvalue > ALPHA
  # With replacement's law (q(a) q(b), renormalised) is far off.
  with_replacement = np.array([q[a] * q[b] for a, b in pairs])
  with_replacement *= SAMPLES / with_replacement.sum()
  assert scipy.stats.chisquare(observed, with_replacement).pvalue < WRONG


def test_slots_past_the_positive_tokens_are_flagged():
  log_q = log(np.array([[[0.0, 0.6, 0.0, 0.4], [0.0, 0.0, 1.0, 0.0]]] * 2))
  tokens, drawn = tree_sampling.draw_children(
      jax.random.split(jax.random.key(2), 2), log_q, 3)
  np.testing.assert_array_equal(drawn, [[[True, True, False],
                                         [True, False, False]]] * 2)
  assert {int(t) for t in tokens[0, 0, :2]} == {1, 3}
  assert {int(t) for t in tokens[1, 0, :2]} == {1, 3}
  np.testing.assert_array_equal(tokens[:, 1, 0], [2, 2])
  with pytest.raises(ValueError, match='count=5'):
    tree_sampling.draw_children(jax.random.split(jax.random.key(2), 2),
                                log_q, 5)


def jit_batch():
  """3 examples, each its own 5-node tree, with one-hot p's: the outcome
  is known whatever the keys.
  0: a chain 0-1-2-3-4 drawn from a uniform q, p one-hot at the next
     token: all accepted, then token 2.
  1: the root's children 1 and 2 (point masses at 1 and 2), 3 under 2,
     node 4 invalid; p_root one-hot at 2: node 1 rejected, 2 accepted,
     then 3, then token 0.
  2: the root's 4 point-mass children at 1, 2, 3, 3; p_root one-hot at 0:
     every one rejected (the repeated 3 has nothing left to test), token
     0."""
  vocab = 4
  parents = jnp.asarray([[0, 0, 1, 2, 3], [0, 0, 0, 2, 0], [0, 0, 0, 0, 0]],
                        jnp.int32)
  depths = jnp.asarray([[0, 1, 2, 3, 4], [0, 1, 1, 2, 0], [0, 1, 1, 1, 1]],
                       jnp.int32)
  tokens = jnp.asarray([[0, 1, 2, 3, 1], [0, 1, 2, 3, 3], [0, 1, 2, 3, 3]],
                       jnp.int32)
  valid = jnp.asarray([[True] * 5, [True] * 4 + [False], [True] * 5])
  tree = tree_lib.TreeBlock(tokens, parents, depths, valid,
                            tree_lib.ancestor_matrix(parents, 4))
  after = jnp.asarray([[1, 2, 3, 1, 2], [2, 0, 3, 0, 0], [0, 0, 0, 0, 0]])
  log_p = point_mass(after, vocab)
  log_q = point_mass(tokens, vocab).at[0].set(jnp.log(0.25))
  return tree, log_p, log_q


def test_runs_jitted_on_a_batch_of_different_trees():
  tree, log_p, log_q = jit_batch()
  keys = jax.random.split(jax.random.key(3), 3)
  verify = jax.jit(tree_sampling.verify, static_argnames='depth')
  best, accepted, path, token = verify(keys, tree, log_p, log_q, depth=4)
  np.testing.assert_array_equal(best, [4, 3, 0])
  np.testing.assert_array_equal(accepted, [4, 2, 0])
  np.testing.assert_array_equal(path, [[0, 1, 2, 3, 4], [0, 2, 3, 0, 0],
                                       [0, 0, 0, 0, 0]])
  np.testing.assert_array_equal(token, [2, 0, 0])
  assert token.dtype == jnp.int32
  # Random p's: jitted and eager agree, and the path descends the tree.
  log_p = jax.nn.log_softmax(jax.random.normal(jax.random.key(4),
                                               log_p.shape))
  log_q = log_q.at[0].set(jax.nn.log_softmax(jax.random.normal(
      jax.random.key(5), (5, 4))))
  jitted = verify(keys, tree, log_p, log_q, depth=4)
  eager = tree_sampling.verify(keys, tree, log_p, log_q, 4)
  for a, b in zip(jitted, eager):
    np.testing.assert_array_equal(a, b)
  best, accepted, path, _ = jitted
  for b in range(3):
    n = int(accepted[b])
    assert int(path[b, n]) == int(best[b]) and not path[b, n + 1:].any()
    for d in range(1, n + 1):
      assert int(tree.parents[b, path[b, d]]) == int(path[b, d - 1])
      assert bool(tree.valid[b, path[b, d]])
