"""Token trees: their shapes, drafts merged into them, and verification.

Verification of a tree is checked against verifying each of its paths
alone as a chain (`blockwise.verify`): the tree must accept exactly the
longest of those.
"""

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bpd_jax.decoding import Exact, TopK, blockwise, tree as tree_lib
from bpd_jax.decoding.tree import Tree


def test_tree_shapes():
  tree = Tree.from_widths((2, 2), 3)
  assert tree.paths == ((0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1),
                        (0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0))
  assert (tree.size, tree.depth, tree.top_t) == (11, 3, 2)
  assert tree.leaves == ((0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0))
  assert Tree.chain(3).is_chain and not tree.is_chain
  assert Tree.chain(3).paths == Tree.from_widths((1,), 3).paths
  assert Tree.from_spec('2,2', 3) == tree
  # The order of the given paths does not matter: trees are compared and
  # hashed (compilation keys) by their nodes.
  assert Tree(tuple(reversed(tree.paths))) == tree
  assert hash(Tree(tuple(reversed(tree.paths)))) == hash(tree)


@pytest.mark.parametrize('paths, message', [
    ((), 'at least one node'),
    (((0,), (0,)), 'twice'),
    (((0, 1),), r'no parent \(0,\)'),
    (((-1,),), 'integers >= 0'),
    (((True,),), 'integers >= 0'),
    ((('a',), (0,)), 'integers >= 0'),
    ((0, 1), 'integers >= 0'),
])
def test_bad_trees(paths, message):
  with pytest.raises(ValueError, match=message):
    Tree(paths)
  with pytest.raises(ValueError, match='widths'):
    Tree.from_widths((2, 0), 3)
  with pytest.raises(ValueError, match='widths like'):
    Tree.from_spec('2;2', 3)


def test_tree_widths_are_integers_not_bools():
  with pytest.raises(ValueError, match=r'tree widths \(True,\) must be 1 to '
                     r'2 integers >= 1'):
    Tree.from_widths((True,), 2)
  assert Tree.from_widths((np.int64(2),), 2) == Tree.from_widths((2,), 2)
  assert Tree(((np.int64(0),),)).paths == ((0,),)


def test_trees_beyond_the_node_budget_are_refused_when_made():
  budget = tree_lib.MAX_NODES
  # 30 + 900 + 27,000 nodes below the root, counted from the widths.
  with pytest.raises(ValueError, match=f'a tree of 27,931 nodes \\(root '
                     f'included\\) exceeds the budget of {budget} nodes'):
    Tree.from_widths((30, 30, 30), 3)
  with pytest.raises(ValueError, match='27,931 nodes'):
    Tree.from_spec('30,30,30', 3)
  # The argmax below the widths counts too: 2 + 254 x 2 nodes.
  with pytest.raises(ValueError, match='a tree of 511 nodes'):
    Tree.from_widths((2,), 255)
  assert Tree.chain(budget - 1).size == budget
  with pytest.raises(ValueError, match=f'a tree of {budget + 1} nodes'):
    Tree.chain(budget)
  paths = tuple((r,) for r in range(budget))
  assert Tree(paths[:-1]).size == budget
  with pytest.raises(ValueError, match=f'a tree of {budget + 1} nodes'):
    Tree(paths)
  probabilities = np.full((3, 10), 0.5)
  assert Tree.best(probabilities, budget).size == budget
  with pytest.raises(ValueError, match=f'a tree of {budget + 1} nodes'):
    Tree.best(probabilities, budget + 1)


def test_tree_sizes_are_checked_against_the_heads_and_the_budget():
  tree_lib.check_sizes((2, 21), 4, 2)
  tree_lib.check_sizes((tree_lib.MAX_NODES,), 4, 5)
  with pytest.raises(ValueError, match=r'tree sizes \[1, 22\]: a tree of '
                     r'the top 4 of 2 heads has 2 to 21 nodes\.'):
    tree_lib.check_sizes((1, 5, 22), 4, 2)
  # 1 + 4 + ... + 4^5 = 1,365 nodes: the budget is the limit.
  with pytest.raises(ValueError, match=rf'tree sizes \[{tree_lib.MAX_NODES + 1}'
                     rf'\] must be 2 to {tree_lib.MAX_NODES}: a larger tree '
                     rf'exceeds the budget'):
    tree_lib.check_sizes((tree_lib.MAX_NODES + 1,), 4, 5)


def test_best_tree_takes_the_most_probable_paths():
  probabilities = np.array([[0.6, 0.3, 0.1], [0.5, 0.4, 0.1]])
  tree = Tree.best(probabilities, 5)
  # Path probabilities: (0) .6, (1) .3, (0,0) .3, (0,1) .24, (1,0) .15 ...
  assert set(tree.paths) == {(0,), (1,), (0, 0), (0, 1)}
  # Every tree of 4 nodes below the root expects no more.
  best = tree.expected_block(probabilities)
  assert best == pytest.approx(1 + 0.6 + 0.3 + 0.3 + 0.24)
  candidates = [(r,) for r in range(3)] + [
      (r, s) for r in range(3) for s in range(3)]
  for paths in itertools.combinations(candidates, 4):
    try:
      other = Tree(paths)
    except ValueError:
      continue  # Not closed under prefixes.
    assert other.expected_block(probabilities) <= best + 1e-12


def test_drafts_merge_on_their_shared_prefixes():
  # Root 9; drafts [1 2 3], [1 2 4], [5 6 7], [1 8 3]: 10 distinct nodes.
  drafts = jnp.array([[[9, 1, 2, 3], [9, 1, 2, 4], [9, 5, 6, 7],
                       [9, 1, 8, 3]]])
  block = tree_lib.from_drafts(drafts, (3, 3, 3, 3), 10)
  np.testing.assert_array_equal(block.tokens[0],
                                [9, 1, 2, 3, 4, 5, 6, 7, 8, 3])
  np.testing.assert_array_equal(block.parents[0],
                                [0, 0, 1, 2, 2, 0, 5, 6, 1, 8])
  np.testing.assert_array_equal(block.depths[0],
                                [0, 1, 2, 3, 3, 1, 2, 3, 2, 3])
  assert block.valid[0].all()
  # Node 7 (draft 3's last) sees the root, 5, 6 and itself.
  np.testing.assert_array_equal(np.flatnonzero(block.ancestors[0, 7]),
                                [0, 5, 6, 7])
  # A budget of 6 nodes: draft 3 and the end of draft 2 are dropped.
  small = tree_lib.from_drafts(drafts, (3, 3, 3, 3), 6)
  np.testing.assert_array_equal(small.tokens[0], [9, 1, 2, 3, 4, 5])
  assert small.valid[0].all()
  # Drafts of different lengths: draft 1 stops after one proposal.
  short = tree_lib.from_drafts(drafts[:, :2], (3, 1), 5)
  np.testing.assert_array_equal(short.tokens[0, :4], [9, 1, 2, 3])
  assert not short.valid[0, 4]  # Draft 1's one node is draft 0's.


def chain_verdicts(criterion, block, logits, scored):
  """Each valid path's accepted proposals when verified alone as a chain."""
  verdicts = {0: 0}  # The root alone: no proposal.
  tokens = np.asarray(block.tokens[0])
  for node in range(1, block.tokens.shape[1]):
    if not block.valid[0, node]:
      continue
    path = np.flatnonzero(block.ancestors[0, node])  # Ancestors first.
    proposals = tokens[path[1:]][None]
    parent_logits = logits[0, path[:-1]][None]
    accepted = blockwise.verify(criterion, jnp.asarray(proposals),
                                jnp.asarray(parent_logits), 0,
                                scored[0, path[:-1]][None])
    verdicts[node] = int(accepted[0])
  return verdicts


@pytest.mark.parametrize('criterion', [Exact(), TopK(2)])
def test_tree_accepts_what_its_best_path_accepts_alone(criterion):
  rng = np.random.default_rng(0)
  vocab = 4
  for trial in range(20):
    drafts = jnp.asarray(rng.integers(0, vocab, (1, 4, 4)))
    drafts = drafts.at[:, :, 0].set(drafts[:, :1, 0])  # One root.
    block = tree_lib.from_drafts(drafts, (3, 3, 3, 3), 13)
    logits = jnp.asarray(rng.normal(size=(1, 13, vocab)))
    scored = jnp.argmax(logits, -1)
    best, accepted, path = tree_lib.verify(criterion, block, logits, scored,
                                           3)
    verdicts = chain_verdicts(criterion, block, logits, scored)
    assert int(accepted[0]) == max(verdicts.values()), trial
    # The winner's path verified alone accepts all of it.
    winner = np.flatnonzero(block.ancestors[0, int(best[0])])
    np.testing.assert_array_equal(path[0, :len(winner)], winner)
    assert verdicts[int(best[0])] == int(accepted[0])


def test_invalid_nodes_are_never_accepted():
  drafts = jnp.array([[[3, 1, 1], [3, 1, 2]]])
  block = tree_lib.from_drafts(drafts, (2, 2), 5)
  assert not block.valid[0, 4]  # 4 distinct nodes: one slot unused.
  invalid = dataclasses.replace(block, valid=block.valid.at[0, 3].set(False))
  # The model's argmax is 1 after the root, 2 after node 1: node 3 (token
  # 2 under node 1) is the right one, but invalid.
  scored = jnp.array([[1, 2, 0, 0, 0]])
  logits = jax.nn.one_hot(scored, 4)
  _, accepted, _ = tree_lib.verify(Exact(), block, logits, scored, 2)
  assert int(accepted[0]) == 2
  _, accepted, _ = tree_lib.verify(Exact(), invalid, logits, scored, 2)
  assert int(accepted[0]) == 1


def test_a_static_trees_layout_is_its_leaves_merged():
  """Tree.layout's constant topology is what merging its leaves' drafts
  gives when each rank holds its own token."""
  tree = Tree((( 0,), (1,), (2,), (0, 0), (0, 1), (2, 0), (0, 1, 0)))
  token = lambda path: 10 * len(path) + path[-1]  # Distinct per depth, rank.
  nodes = jnp.array([[token(p) for p in tree.paths]])
  block = tree.layout(1, jnp.concatenate([jnp.array([[7]]), nodes], axis=1))
  drafts = jnp.array([[[7] + [token(leaf[:d + 1]) for d in range(len(leaf))]
                       + [0] * (tree.depth - len(leaf))
                       for leaf in tree.leaves]])
  merged = tree_lib.from_drafts(drafts, [len(l) for l in tree.leaves],
                                tree.size)
  # The same nodes (numbered in another order): each node's tokens from
  # the root down, by its ancestors, and its depth.
  def paths(b):
    tokens = np.asarray(b.tokens[0])
    return sorted((tuple(tokens[np.flatnonzero(b.ancestors[0, i])]),
                   int(b.depths[0, i])) for i in range(tree.size)
                  if b.valid[0, i])
  assert paths(block) == paths(merged)
  assert len(paths(block)) == tree.size
  # Parents come before their children, as the decoder needs.
  assert (np.asarray(block.parents[0, 1:]) < np.arange(1, tree.size)).all()


@pytest.mark.parametrize('make, message', [
    (lambda: Tree(None), r'tree paths=None must be a sequence'),
    (lambda: Tree.from_widths(None, 3), r'tree widths=None must be a sequence'),
    (lambda: Tree.from_widths((2,), True), r'tree depth=True must be an integer'),
    (lambda: Tree.from_widths((2,), 2.0), r'tree depth=2.0 must be an integer'),
    (lambda: Tree.chain(2.5), r'tree depth=2.5 must be an integer'),
    (lambda: Tree.from_spec(None, 3), r'tree spec None is not a string'),
    (lambda: Tree.best(np.ones(3), 8), r'tree probabilities of shape \(3,\) '
     r'must be \[depth, t\]'),
    (lambda: Tree.best(np.zeros((0, 4)), 4), r'of shape \(0, 4\)'),
    (lambda: Tree.best(np.full((3, 4), np.nan), 8), r'finite numbers in \[0, 1\]'),
    (lambda: Tree.best(np.full((3, 4), -1.0), 8), r'finite numbers in \[0, 1\]'),
    (lambda: Tree.best(np.full((3, 4), 2.0), 8), r'finite numbers in \[0, 1\]'),
    # A lattice of 1 head's top 2 holds 3 nodes: never fewer than asked.
    (lambda: Tree.best(np.full((1, 2), 0.5), 10), r'tree sizes \[10\]: a tree '
     r'of the top 2 of 1 heads has 2 to 3 nodes'),
])
def test_arguments_of_the_wrong_type_or_range_are_one_value_error(make,
                                                                  message):
  with pytest.raises(ValueError, match=message):
    make()
