"""Trees grown level by level: a static tree's ranks, a dynamic tree's
expand and rerank (EAGLE-2), and the DynamicTree value."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bpd_jax.decoding import tree as tree_lib
from bpd_jax.decoding import tree_growth
from bpd_jax.decoding.tree import DynamicTree, Tree

VOCAB = 6


def depth_logits(seed, batch, depth):
  """[batch, depth, VOCAB] random logits with distinct probabilities."""
  return jnp.asarray(np.random.default_rng(seed).normal(
      0, 2, (batch, depth, VOCAB)))


def grow_one_pass(growth, logits):
  """Grows `growth` as a one-pass drafter's logits [batch, depth, vocab]
  do; returns the block after root token 0."""
  for level in range(logits.shape[1]):
    growth.grow(level, logits[:, level:level + 1])
  return growth.block(jnp.zeros((logits.shape[0],), jnp.int32))


def paths_of(block, b):
  """{node: its token path from the root} of example b."""
  parents, tokens = np.asarray(block.parents[b]), np.asarray(block.tokens[b])
  paths = {0: ()}
  for node in range(1, len(parents)):
    assert parents[node] < node  # Parents before their children.
    paths[node] = paths[int(parents[node])] + (int(tokens[node]),)
  return paths


@pytest.mark.parametrize('size,top', [(5, 2), (9, 3), (13, 6)])
def test_a_wide_frontier_keeps_the_most_probable_paths(size, top):
  # With every node expanded (frontier >= top^depth), the kept nodes are
  # the size - 1 most probable of all paths over each depth's top tokens.
  depth, batch = 3, 2
  logits = depth_logits(0, batch, depth)
  block = grow_one_pass(tree_growth.DynamicGrowth(
      DynamicTree(size, depth, top=top, frontier=top ** depth)), logits)
  log_p = np.asarray(jax.nn.log_softmax(logits, axis=-1))
  for b in range(batch):
    tops = [np.argsort(-log_p[b, d])[:top] for d in range(depth)]
    every = [path for d in range(1, depth + 1)
             for path in itertools.product(*tops[:d])]
    score = lambda path: sum(log_p[b, d, t] for d, t in enumerate(path))
    best = sorted(every, key=score, reverse=True)[:size - 1]
    kept = set(paths_of(block, b).values()) - {()}
    assert kept == set(best)
  np.testing.assert_array_equal(
      block.ancestors, tree_lib.ancestor_matrix(block.parents, depth))
  assert block.valid.all()


def test_a_narrow_frontier_expands_only_its_most_probable_nodes():
  depth, frontier, top = 3, 2, 3
  logits = depth_logits(1, 1, depth)
  block = grow_one_pass(tree_growth.DynamicGrowth(
      DynamicTree(12, depth, top=top, frontier=frontier)), logits)
  log_p = np.asarray(jax.nn.log_softmax(logits, axis=-1))[0]
  paths = set(paths_of(block, 0).values())
  score = lambda path: sum(log_p[d, t] for d, t in enumerate(path))
  # A node with children is among its level's `frontier` most probable.
  for level in (1, 2):
    drafted = [p for p in itertools.product(
        *[np.argsort(-log_p[d])[:top] for d in range(level)])
               if all(p[:j] in paths or j == 0 for j in range(level))]
    parents = {p[:level] for p in paths if len(p) > level}
    expanded = sorted(drafted, key=score, reverse=True)[:frontier]
    assert parents <= set(expanded)
  assert len(paths) == 12


def test_a_dependent_drafters_nodes_get_their_own_distributions():
  # A drafter whose children's distribution depends on the node (here:
  # its token's row of a table): grow hands back the next frontier, and
  # the kept nodes are scored by their own paths.
  table = jnp.asarray(np.random.default_rng(2).normal(0, 2, (VOCAB, VOCAB)))
  tree = DynamicTree(7, 3, top=2, frontier=2)
  growth = tree_growth.DynamicGrowth(tree)
  tokens = jnp.zeros((1, 1), jnp.int32)
  for level in range(3):
    tokens, parents = growth.grow(level, table[tokens])
    assert tokens.shape == parents.shape == (1, tree.widths[level + 1]
                                             if level < 2 else 0)
  block = growth.block(jnp.zeros((1,), jnp.int32))
  log_p = np.asarray(jax.nn.log_softmax(table, axis=-1))
  paths = paths_of(block, 0)
  scores = [sum(log_p[([0] + list(p))[d], p[d]] for d in range(len(p)))
            for p in paths.values() if p]
  # Kept in the order drafted; each no more probable than its parent.
  for node, path in paths.items():
    if len(path) > 1:
      parent = next(n for n, p in paths.items() if p == path[:-1])
      assert scores[node - 1] <= scores[parent - 1] + 1e-12


def test_a_low_temperature_keeps_the_argmax_chain():
  # Sharpened, the argmax at each depth is nearly certain: a tree of
  # depth + 1 nodes is the argmax chain; unsharpened it is not (these
  # logits' second depth-1 token outscores the chain's depth-3 node).
  depth = 3
  logits = jnp.asarray([[[2.0, 1.9, 0, 0, 0, 0], [1.0, 0, 0, 0, 0, 0],
                         [1.0, 0, 0, 0, 0, 0]]])
  chain = {(0,), (0, 0), (0, 0, 0)}
  for temperature, is_chain in ((0.05, True), (1.0, False)):
    block = grow_one_pass(tree_growth.DynamicGrowth(DynamicTree(
        4, depth, top=2, frontier=2, temperature=temperature)), logits)
    assert (set(paths_of(block, 0).values()) - {()} == chain) == is_chain


def test_static_growth_draws_take_each_parents_first_draws():
  # Ranks (0, 2) under one parent: by rank the first and third candidate,
  # as draws the first and second (draws verify as a prefix of their
  # order).
  tree = Tree(((0,), (2,)))
  candidates = lambda level, logits, count: (
      jnp.broadcast_to(jnp.arange(count) + 10, logits.shape[:2] + (count,)),
      jnp.ones(logits.shape[:2] + (count,), bool))
  logits = jnp.zeros((1, 1, 1, VOCAB))
  ranked = grow_one_pass(tree_growth.StaticGrowth(tree, candidates),
                         logits[0])
  drawn = grow_one_pass(tree_growth.StaticGrowth(tree, candidates,
                                                 draws=True), logits[0])
  np.testing.assert_array_equal(ranked.tokens, [[0, 10, 12]])
  np.testing.assert_array_equal(drawn.tokens, [[0, 10, 11]])


def test_dynamic_growth_over_draws_keeps_a_prefix_of_each_nodes_draws():
  # Children drawn without replacement (a dependent drafter, 24 examples):
  # the j-th child's score is its parent's plus the j-th greatest log q,
  # fixed before the draws, so each node keeps a prefix of its draws, in
  # draw order, and every kept node's logits are its parent's.
  from bpd_jax.decoding import tree_sampling  # pylint: disable=g-import-not-at-top
  batch, depth = 24, 3
  table = jnp.asarray(np.random.default_rng(3).normal(0, 2, (VOCAB, VOCAB)))
  keys = jax.random.split(jax.random.key(0), batch)

  def choose(level, logits, count):
    level_keys = jax.vmap(jax.random.fold_in, (0, None))(keys, level)
    return tree_sampling.draw_children(
        level_keys, jax.nn.log_softmax(logits), count)

  growth = tree_growth.DynamicGrowth(
      DynamicTree(6, depth, top=3, frontier=2), choose)
  drawn = {}  # (example, parent path) -> its draws in order.
  tokens = jnp.zeros((batch, 1), jnp.int32)
  paths = [[()] for _ in range(batch)]
  for level in range(depth):
    logits = table[tokens]
    draws = np.asarray(choose(level, logits, 3)[0])
    for b in range(batch):
      for w, path in enumerate(paths[b]):
        drawn[b, path] = list(draws[b, w])
    tokens, parents = growth.grow(level, logits)
    paths = [[paths[b][int(p)] + (int(t),) for p, t in zip(
        np.asarray(parents[b]), np.asarray(tokens[b]))]
             for b in range(batch)]
  block = growth.block(jnp.zeros((batch,), jnp.int32))
  node_logits = np.asarray(growth.node_logits())
  pruned = 0
  for b in range(batch):
    kept = paths_of(block, b)
    for node, path in kept.items():
      if not path:
        continue
      np.testing.assert_allclose(node_logits[b, node],
                                 table[((0,) + path)[-2]])
      siblings = [p[-1] for n, p in sorted(kept.items())
                  if len(p) == len(path) and p[:-1] == path[:-1]]
      assert siblings == drawn[b, path[:-1]][:len(siblings)]
      pruned += len(siblings) < 3
  assert pruned  # The rerank did drop later draws somewhere.


def test_dynamic_tree_specs_and_limits():
  tree = DynamicTree(32, 4, top=4)
  assert tree.spec == 'dynamic:32,top=4'
  assert Tree.from_spec(tree.spec, 4) == tree
  assert Tree.from_spec('dynamic:16', 3) == DynamicTree(16, 3)
  assert tree.widths == (1, 4, 8, 8)
  assert tree.drafted == 4 * (1 + 4 + 8 + 8)
  assert tree.size == 32 and tree.depth == 4 and not tree.is_chain
  assert math.isclose(tree.top_t, 4)
  for spec, message in [
      ('dynamic', 'is not "dynamic:N"'), ('dynamic:x', 'is not "dynamic:N"'),
      ('dynamic:8,wide=2', "'wide=2' is not one of top=, frontier=, "
       'temperature='),
      ('dynamic:8,top=2,top=3', 'top= is given twice'),
      ('dynamic:8,top=two', "top='two' is not an integer"),
      ('dynamic:1', 'has no proposal'),
      ('dynamic:257', 'exceeds the budget of 256'),
      ('dynamic:64,top=2,frontier=2', r'keeps more nodes than its depth 4, '
       r'top 2 and frontier 2 draft \(14\)')]:
    with pytest.raises(ValueError, match=message):
      Tree.from_spec(spec, 4)
  with pytest.raises(ValueError, match='top=0 must be an integer >= 1'):
    DynamicTree(8, 3, top=0)
  sharp = Tree.from_spec('dynamic:16,top=4,temperature=0.25', 3)
  assert sharp == DynamicTree(16, 3, top=4, temperature=0.25)
  assert sharp.spec == 'dynamic:16,top=4,temperature=0.25'
  for temperature in (0, -1, float('nan'), float('inf'), True):
    with pytest.raises(ValueError, match='must be a finite number > 0'):
      DynamicTree(8, 3, temperature=temperature)
