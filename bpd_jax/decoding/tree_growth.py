"""Growing a call's token tree level by level, each node drafted once.

A tree of drafts (`tree.Tree`, a static shape; `tree.DynamicTree`, made
anew each call) is grown from the root, the last accepted token, one level
at a time. At level d the drafter gives the distribution of the children
of each of the level's expanded nodes, [batch, W_d, vocab]; a `Growth`
picks their tokens and says which of them the drafter expands next (their
parents among the W_d). So a drafter whose heads read each other's
proposals (sequential heads, the draft layer) drafts each node once, a
level's nodes in one batched step (`DecodingFns.draft_tree`), however many
leaves share it; a one-pass drafter's distributions depend on the depth
alone, so its [batch, 1, vocab] at each depth serves every node there.

- `StaticGrowth`: a `Tree`'s nodes, each the r-th candidate of its parent
  (the r-th most likely token; sampling: the r-th draw without
  replacement).
- `DynamicGrowth`: EAGLE-2's expand and rerank (Li et al. 2024): the
  `frontier` nodes of highest path probability at each level expanded
  into their `top` children each, then the `size` - 1 most probable nodes
  of all kept, per example.

Both end in a `tree.TreeBlock` (`block`), verified and committed as every
tree is (`tree.verify`, `DecodingFns.commit`).
"""

import jax
import jax.numpy as jnp
import numpy as np

from bpd_jax.decoding import tree as tree_lib
from bpd_jax.decoding.types import Cache, DecodingFns


def greedy_children(level: int, logits: jax.Array, count: int):
  """The `count` most likely children of each node: ([batch, W, count]
  tokens, in rank order; [batch, W, count] bool, all True)."""
  del level
  _, top = jax.lax.top_k(logits, count)
  return top.astype(jnp.int32), jnp.ones(top.shape, bool)


class StaticGrowth:
  """A `Tree`'s nodes grown level by level.

  Args:
    tree: the static tree.
    choose: (level, logits [batch, W, vocab], count) -> (tokens [batch, W,
      count], drawn [batch, W, count] bool): the first `count` candidates
      of each expanded node, in rank order, False where a candidate could
      not be drawn (no probability left); `greedy_children` or a sampler's
      draws without replacement.
    draws: the candidates are draws: a node's children take its first
      draws in their ranks' order, not the draws of their ranks.
  """

  def __init__(self, tree: tree_lib.Tree, choose=greedy_children,
               draws: bool = False):
    self.tree, self.choose = tree, choose
    self.index = index = {path: i + 1 for i, path in enumerate(tree.paths)}
    inner = {path[:-1] for path in tree.paths}
    # Per level d: the nodes it expands (depth d, with children; the root
    # at level 0), and the children (depth d + 1) with their parent's
    # place among the expanded nodes and their rank.
    self.expanded, self.children = [[()]], []
    for depth in range(1, tree.depth + 1):
      level = [path for path in tree.paths if len(path) == depth]
      place = {path: i for i, path in enumerate(self.expanded[-1])}
      # Draws: a node's children take its first draws, in rank order
      # (draws without replacement verify as a prefix of their order,
      # `tree_sampling.verify`), whatever ranks a tree skips.
      order = [sorted(p[-1] for p in level if p[:-1] == path[:-1]).index(
          path[-1]) if draws else path[-1] for path in level]
      self.children.append((np.array([index[path] for path in level]),
                            np.array([place[path[:-1]] for path in level]),
                            np.array(order)))
      self.expanded.append([path for path in level if path in inner])
    self.tokens = {}  # Node id -> [batch] token.
    self.drawn = {}  # Node id -> [batch] bool.
    self.log_q = {}  # Node id -> [batch, vocab] what it was chosen from.

  def grow(self, level: int, logits: jax.Array):
    """Picks the children of level `level`'s expanded nodes.

    Args:
      level: 0 (the root) to depth - 1.
      logits: [batch, W, vocab] the drafter's logits of the children of
        each expanded node (W: the level's expanded nodes, or 1 for a
        one-pass drafter, whose distribution serves every node).

    Returns:
      (tokens [batch, W'], parents [batch, W']): the next level's expanded
      nodes and their places among this level's (W' may be 0).
    """
    ids, parents, ranks = self.children[level]
    count = int(ranks.max()) + 1
    chosen, drawn = self.choose(level, logits, count)
    source = parents if logits.shape[1] > 1 else np.zeros_like(parents)
    tokens = chosen[:, source, ranks]
    drawn = drawn[:, source, ranks]
    for column, node in enumerate(ids):
      self.tokens[int(node)] = tokens[:, column]
      self.drawn[int(node)] = drawn[:, column]
      self.log_q[int(node)] = logits[:, source[column]]
    following = self.expanded[level + 1]
    place = {int(node): column for column, node in enumerate(ids)}
    columns = np.array([place[self.index[path]] for path in following],
                       np.int32)
    batch = logits.shape[0]
    return (tokens[:, columns],
            jnp.broadcast_to(jnp.asarray(parents[columns], jnp.int32),
                             (batch, len(following))))

  def block(self, root: jax.Array) -> tree_lib.TreeBlock:
    """The grown tree after the root token [batch]."""
    nodes = range(1, self.tree.size)
    tokens = jnp.stack([root] + [self.tokens[i].astype(root.dtype)
                                 for i in nodes], axis=1)
    block = self.tree.layout(root.shape[0], tokens)
    drawn = jnp.stack([jnp.ones_like(root, bool)]
                      + [self.drawn[i] for i in nodes], axis=1)
    return tree_lib.TreeBlock(tokens=block.tokens, parents=block.parents,
                              depths=block.depths, valid=block.valid & drawn,
                              ancestors=block.ancestors)

  def node_logits(self) -> jax.Array:
    """[batch, N, vocab] the logits each node was chosen from (node 0's:
    a copy of node 1's, unread)."""
    nodes = [self.log_q[i] for i in range(1, self.tree.size)]
    return jnp.stack(nodes[:1] + nodes, axis=1)


class DynamicGrowth:
  """EAGLE-2's expand and rerank over a `DynamicTree`, per example.

  A node's j-th child scores its parent's score plus the log of the
  drafter's j-th greatest probability there. For children taken by rank
  (the argmax's) that is the child's own probability, as EAGLE-2 scores;
  for children drawn without replacement (sampling) it is fixed before
  anything is drawn, so whether a draw is kept never depends on the
  draws: each node keeps a prefix of its draws, tried in draw order
  (`tree_sampling.verify`), and the rejection rule stays lossless. A
  score never exceeds its parent's or an earlier sibling's.

  Args:
    tree: the dynamic tree.
    draw: (level, logits, count) -> each expanded node's first `count`
      draws without replacement, in order, and whether each could be drawn
      (as `StaticGrowth`'s `choose`); None: the children are the ranks
      (argmax proposals), read off the top_k that scores them.
  """

  def __init__(self, tree: tree_lib.DynamicTree, draw=None):
    self.tree, self.draw = tree, draw
    self.widths = tree.widths + (0,)
    # The pool of drafted nodes, level by level: [batch, n] each.
    self.pool_tokens, self.pool_parents, self.pool_scores = [], [], []
    self.pool_depths = []
    # The logits each pool node was chosen from: its level's [batch, W,
    # vocab] and its parent's place among them, numbered over all levels.
    self.level_logits, self.pool_sources = [], []
    self.frontier_scores = None  # [batch, W] path log-probabilities.
    self.frontier_ids = None  # [batch, W] their pool ids (-1: the root).
    self.drafted = 0  # Nodes in the pool.
    self.kept = None  # [batch, N - 1] the kept nodes' pool ids, once known.

  def grow(self, level: int, logits: jax.Array):
    """Expands level `level`'s frontier into `top` children each and
    picks the next frontier (arguments and return as
    `StaticGrowth.grow`)."""
    batch, width = logits.shape[0], self.widths[level]
    if level == 0:
      self.frontier_scores = jnp.zeros((batch, 1), jnp.float32)
      self.frontier_ids = jnp.full((batch, 1), -1, jnp.int32)
    top = self.tree.top
    log_probs = jax.nn.log_softmax(
        logits.astype(jnp.float32) / self.tree.temperature, axis=-1)
    child_scores, ranked = jax.lax.top_k(log_probs, top)
    if self.draw is None:
      child_tokens = ranked.astype(jnp.int32)
    else:
      child_tokens, drawn = self.draw(level, logits, top)
      child_scores = jnp.where(drawn, child_scores, -jnp.inf)
    shape = (batch, width, top)
    child_scores = jnp.broadcast_to(child_scores, shape)
    child_tokens = jnp.broadcast_to(child_tokens, shape)
    scores = (self.frontier_scores[:, :, None] + child_scores).reshape(
        batch, width * top)
    self.pool_tokens.append(child_tokens.reshape(batch, width * top))
    self.pool_parents.append(jnp.repeat(self.frontier_ids, top, axis=1))
    self.pool_scores.append(scores)
    self.pool_depths.append(np.full(width * top, level + 1, np.int32))
    # A one-pass drafter's logits ([batch, 1, vocab]) serve every parent.
    offset = sum(part.shape[1] for part in self.level_logits)
    places = np.arange(width) if logits.shape[1] > 1 else np.zeros(width)
    self.pool_sources.append(offset + np.repeat(places, top).astype(np.int32))
    self.level_logits.append(logits)
    first = self.drafted
    self.drafted += width * top
    following = self.widths[level + 1]
    if not following:
      return (jnp.zeros((batch, 0), jnp.int32),
              jnp.zeros((batch, 0), jnp.int32))
    self.frontier_scores, kept = jax.lax.top_k(scores, following)
    self.frontier_ids = (first + kept).astype(jnp.int32)
    tokens = jnp.take_along_axis(self.pool_tokens[-1], kept, axis=1)
    return tokens.astype(jnp.int32), (kept // top).astype(jnp.int32)

  def block(self, root: jax.Array) -> tree_lib.TreeBlock:
    """The `size` - 1 most probable drafted nodes under the root token
    [batch], in the order they were drafted (each parent before its
    children)."""
    tokens = jnp.concatenate(self.pool_tokens, axis=1)
    parents = jnp.concatenate(self.pool_parents, axis=1)
    scores = jnp.concatenate(self.pool_scores, axis=1)
    depths = np.concatenate(self.pool_depths)
    keep = self.tree.size - 1
    chosen = self._chosen()
    batch, rows = root.shape[0], jnp.arange(root.shape[0])[:, None]
    # Pool id -> node (1..keep); the root's pool id is -1, its node 0.
    node_of = jnp.zeros((batch, self.drafted + 1), jnp.int32).at[
        rows, chosen + 1].set(jnp.arange(1, keep + 1, dtype=jnp.int32))
    node_parents = jnp.take_along_axis(
        node_of, jnp.take_along_axis(parents, chosen, axis=1) + 1, axis=1)
    take = lambda values: jnp.take_along_axis(values, chosen, axis=1)
    zero = jnp.zeros((batch, 1), jnp.int32)
    parents = jnp.concatenate([zero, node_parents], axis=1)
    return tree_lib.TreeBlock(
        tokens=jnp.concatenate([root[:, None],
                                take(tokens).astype(root.dtype)], axis=1),
        parents=parents,
        depths=jnp.concatenate([zero, jnp.asarray(depths)[chosen]], axis=1),
        valid=jnp.concatenate([jnp.ones((batch, 1), bool),
                               take(scores) > -jnp.inf], axis=1),
        ancestors=tree_lib.ancestor_matrix(parents, self.tree.depth))

  def node_logits(self) -> jax.Array:
    """[batch, N, vocab] the logits each kept node was chosen from, in
    `block`'s order (node 0's: a copy of node 1's, unread)."""
    chosen = self._chosen()
    sources = jnp.asarray(np.concatenate(self.pool_sources))[chosen]
    logits = jnp.concatenate(self.level_logits, axis=1)
    nodes = jnp.take_along_axis(logits, sources[..., None], axis=1)
    return jnp.concatenate([nodes[:, :1], nodes], axis=1)

  def _chosen(self) -> jax.Array:
    """[batch, N - 1] the pool ids of the kept nodes, ascending."""
    if self.kept is None:
      scores = jnp.concatenate(self.pool_scores, axis=1)
      # Of equal path scores top_k takes the earlier drafted node first,
      # so a parent (drafted before its children, never scored higher) is
      # kept before them, and a node's earlier children before its later
      # ones.
      self.kept = jnp.sort(jax.lax.top_k(scores, self.tree.size - 1)[1],
                           axis=1)
    return self.kept


def growth(tree, choose=greedy_children, draws: bool = False):
  """The Growth of a Tree or a DynamicTree; `choose` picks the candidates
  (`draws`: they are draws without replacement, see `StaticGrowth`)."""
  if isinstance(tree, tree_lib.DynamicTree):
    return DynamicGrowth(tree, choose if draws else None)
  return StaticGrowth(tree, choose, draws)


def grow(fns: DecodingFns, growth_, cache: Cache, features: jax.Array,
         next_tokens: jax.Array, start: jax.Array, last: jax.Array,
         depth: int) -> Cache:
  """Grows `growth_`'s tree after the last accepted position, to `depth`.

  Args:
    fns: the model's decoding functions: `draft_tree` for a drafter whose
      heads read each other's proposals, else `proposal_logits`.
    growth_: a `StaticGrowth` or `DynamicGrowth`, which keeps the nodes.
    cache, features, next_tokens, start, last: as `steps.proposals`'.
    depth: the tree's depth (k - 1).

  Returns:
    The cache (a drafter may keep entries of its own there).
  """
  if fns.draft_tree is not None:
    return fns.draft_tree(cache, features, next_tokens, start, last,
                          growth_.grow)
  logits, cache = fns.proposal_logits(cache, features, next_tokens, start,
                                      last)
  for level in range(depth):
    growth_.grow(level, logits[:, level:level + 1])
  return cache
