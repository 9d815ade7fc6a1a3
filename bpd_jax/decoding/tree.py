"""Token trees: several drafts per example verified in one model call.

Plain blockwise decoding verifies one draft, a chain of k tokens. A tree
verifies many: drafts that share a prefix share its nodes, the nodes are
laid out as one sequence of N positions per example, and one model call
scores them all, each node attending only to the committed output and to
its own ancestors (`DecodingFns.extend_tree`). Node 0 is the root, the last
accepted token; a node at depth d sits at the root's position + d. A node
is right where the criterion accepts its token against the scoring model's
output at its parent, and it is accepted where it and all its ancestors
are right; the deepest accepted node wins (the first in node order on a
tie), and the path to it is what a chain decode of that draft would have
accepted. Its cache entries are moved to consecutive positions
(`DecodingFns.commit`), and the same call's outputs along the path give the
next proposals.

Two kinds of tree come here:
- `Tree`, a static shape over the heads' candidates (as Medusa's): each
  node is a rank path (r_1, ..., r_d), the r_j-th most likely token of head
  j + 1 at depth j given the path above it;
- the p drafts of a refinement (`refine.py`), merged on their shared
  prefixes (`from_drafts`), at most N nodes.
Both become a `TreeBlock` of per-example arrays: a static tree's topology
is a constant (`Tree.layout`), a refinement's is made each call
(`from_drafts`).
"""

import dataclasses
import heapq
import math

import jax
import jax.numpy as jnp
import numpy as np

from bpd_jax.decoding import criteria as criteria_lib
from bpd_jax.decoding import specs
from bpd_jax.infra import numeric
from bpd_jax.infra import ops

# The most nodes, root included, a tree may have (a static tree, a tuned
# tree's size, a refinement's tree of drafts). Each call scores every node
# against every other ([batch, N, N] ancestor masks, attention over N
# positions, N cache entries more), and no call accepts more than its
# depth + 1 tokens: without a bound a tree of thousands of nodes fills
# memory for nothing. A tree's levels are drafted once each (a level's
# nodes in one batched step), so what a tree compiles grows with its
# depth, not its leaves: 256 nodes compile in seconds even with the
# dearest drafter to compile (the draft layer), and dynamic trees under
# sampling keep gaining past 128.
MAX_NODES = 256


def check_size(nodes: int) -> None:
  """Raises ValueError where a tree of `nodes` nodes (root included)
  exceeds the budget, `MAX_NODES`."""
  if nodes > MAX_NODES:
    raise ValueError(f'a tree of {nodes:,} nodes (root included) exceeds '
                     f'the budget of {MAX_NODES} nodes.')


def _check_depth(depth) -> None:
  """Raises ValueError unless `depth` is an integer >= 1."""
  if not numeric.is_integer(depth) or depth < 1:
    raise ValueError(f'tree depth={depth!r} must be an integer >= 1.')


def most_nodes(top_t: int, depth: int) -> int:
  """Nodes, root included, of the full tree of the top `top_t` tokens of
  `depth` heads: 1 + t + t^2 + ... + t^depth."""
  return 1 + sum(top_t ** d for d in range(1, depth + 1))


def check_sizes(sizes, top_t: int, depth: int) -> None:
  """Raises ValueError naming the sizes (nodes, root included) that no
  tree of the top `top_t` tokens of `depth` heads has within the budget:
  the sizes `Tree.best` is asked for (auto_k's tuning, the bench's
  --tree_sizes)."""
  most = most_nodes(top_t, depth)
  bad = [size for size in sizes if not 2 <= size <= min(most, MAX_NODES)]
  if not bad:
    return
  if most <= MAX_NODES:
    raise ValueError(f'tree sizes {bad}: a tree of the top {top_t} of '
                     f'{depth} heads has 2 to {most} nodes.')
  raise ValueError(f'tree sizes {bad} must be 2 to {MAX_NODES}: a larger '
                   f'tree exceeds the budget of {MAX_NODES} nodes.')


@dataclasses.dataclass(frozen=True)
class Tree:
  """A static tree of the heads' candidates (hashable: a compilation key).

  Attributes:
    paths: the nodes below the root, each its rank path (r_1, ..., r_d):
      the r_j-th most likely token (0: the argmax) of head j + 1 at depth j,
      given the path above it. Every prefix of a path is a path too; the
      order is the nodes' order (by depth, then ranks). At most
      `MAX_NODES` - 1 of them (the root is a node too).
  """
  paths: tuple[tuple[int, ...], ...]

  def __post_init__(self):
    if not isinstance(self.paths, (tuple, list)):
      raise ValueError(f'tree paths={self.paths!r} must be a sequence of '
                       f'rank paths.')
    # Checked before they are sorted: ranks of mixed types have no order.
    for path in self.paths:
      if not (isinstance(path, (tuple, list)) and path and all(
          numeric.is_integer(r) and r >= 0 for r in path)):
        raise ValueError(f'tree node {path!r}: ranks must be integers >= 0.')
    paths = tuple(tuple(int(r) for r in path) for path in self.paths)
    check_size(len(paths) + 1)
    object.__setattr__(self, 'paths', tuple(sorted(paths,
                                                   key=lambda p: (len(p), p))))
    if not self.paths:
      raise ValueError('a tree needs at least one node below the root.')
    if len(set(self.paths)) != len(self.paths):
      raise ValueError('a tree lists a node twice.')
    known = set(self.paths)
    for path in self.paths:
      if len(path) > 1 and path[:-1] not in known:
        raise ValueError(f'tree node {path!r} has no parent {path[:-1]!r} '
                         f'in the tree.')

  @classmethod
  def chain(cls, depth: int) -> 'Tree':
    """The plain draft: every head's argmax, `depth` proposals."""
    _check_depth(depth)
    check_size(depth + 1)  # Before making depth^2 / 2 ranks.
    return cls(tuple((0,) * d for d in range(1, depth + 1)))

  @classmethod
  def from_widths(cls, widths, depth: int) -> 'Tree':
    """Every combination of the top widths[j] tokens at depth j + 1, then
    the argmax down to `depth` (e.g. widths (2, 2), depth 3: 2 + 4 + 4
    nodes)."""
    _check_depth(depth)
    if not isinstance(widths, (tuple, list, np.ndarray)):
      raise ValueError(f'tree widths={widths!r} must be a sequence of '
                       f'integers >= 1.')
    widths = tuple(widths)
    if not widths or len(widths) > depth or not all(
        numeric.is_integer(w) and w >= 1 for w in widths):
      raise ValueError(f'tree widths {widths!r} must be 1 to {depth} '
                       f'integers >= 1.')
    widths = tuple(int(w) for w in widths)
    # Counted before the nodes are made: a product of widths grows fast.
    level, below = 1, 0
    for width in widths:
      level *= width
      below += level
    check_size(1 + below + level * (depth - len(widths)))
    widths += (1,) * (depth - len(widths))
    level, paths = [()], []
    for width in widths:
      level = [path + (r,) for path in level for r in range(width)]
      paths += level
    return cls(tuple(paths))

  @classmethod
  def from_spec(cls, spec: str, depth: int) -> 'Tree | DynamicTree':
    """'W1,W2,...': `from_widths`;
    'dynamic:N[,top=T,frontier=W,temperature=S]': a `DynamicTree`
    (configs, flags)."""
    if not isinstance(spec, str):
      raise ValueError(f'tree spec {spec!r} is not a string like "2,2" or '
                       f'"dynamic:32".')
    if is_dynamic(spec):
      return DynamicTree.from_spec(spec, depth)
    try:
      widths = tuple(int(w) for w in spec.split(','))
    except ValueError:
      raise ValueError(f'tree {spec!r} is not widths like "2,2,1".') from None
    return cls.from_widths(widths, depth)

  @classmethod
  def best(cls, probabilities, size: int) -> 'Tree':
    """The `size`-node tree (root included) of the most probable paths.

    Args:
      probabilities: [depth, t] the probability that head j + 2's rank-r
        token is the right one when the path above it is (measured; see
        `auto_tree`); a path's probability is the product along it.
      size: nodes, root included, 2 to `MAX_NODES`.

    The nodes are taken greedily by path probability, each path after its
    parent (a child is never more probable than its parent): the expected
    accepted length, the sum of the nodes' path probabilities, is the
    largest a tree of this size can have under these probabilities.
    """
    probabilities = np.asarray(probabilities, np.float64)
    if probabilities.ndim != 2 or 0 in probabilities.shape:
      raise ValueError(f'tree probabilities of shape {probabilities.shape} '
                       f'must be [depth, t], both >= 1.')
    if not (np.isfinite(probabilities).all() and (probabilities >= 0).all()
            and (probabilities <= 1).all()):
      raise ValueError('tree probabilities must be finite numbers in [0, 1]: '
                       'they hold NaN, infinities or values outside it.')
    depth, t = probabilities.shape
    if not numeric.is_integer(size) or size < 2:
      raise ValueError(f'a tree of {size!r} nodes has no proposal.')
    check_size(size)
    check_sizes((size,), t, depth)  # No fewer nodes than asked for.
    paths = []
    frontier = [(-probabilities[0, r], (r,)) for r in range(t)]
    heapq.heapify(frontier)
    while frontier and len(paths) < size - 1:
      negative, path = heapq.heappop(frontier)
      paths.append(path)
      if len(path) < depth:
        for r in range(t):
          heapq.heappush(frontier, (negative * probabilities[len(path), r],
                                    path + (r,)))
    return cls(tuple(paths))

  @property
  def size(self) -> int:
    """Nodes, the root included: positions a call scores per example."""
    return len(self.paths) + 1

  @property
  def depth(self) -> int:
    """Proposals on the longest path (the block size k is depth + 1)."""
    return max(len(path) for path in self.paths)

  @property
  def top_t(self) -> int:
    """Candidates read per head: 1 + the largest rank."""
    return 1 + max(max(path) for path in self.paths)

  @property
  def leaves(self) -> tuple[tuple[int, ...], ...]:
    """The paths that are no other path's prefix, in node order."""
    inner = {path[:-1] for path in self.paths}
    return tuple(path for path in self.paths if path not in inner)

  @property
  def is_chain(self) -> bool:
    return self.paths == Tree.chain(self.depth).paths

  @property
  def spec(self) -> str:
    """A short name for reports: 'tree:N' (N nodes)."""
    return f'tree:{self.size}'

  def layout(self, batch: int, tokens: jax.Array) -> 'TreeBlock':
    """The TreeBlock of this shape holding `tokens` [batch, size] (node
    order: the root, then `paths`); its topology is a constant."""
    index = {path: i + 1 for i, path in enumerate(self.paths)}
    parents = np.array([0] + [index.get(p[:-1], 0) for p in self.paths])
    depths = np.array([0] + [len(p) for p in self.paths])
    ancestors = np.eye(self.size, dtype=bool)
    for node, path in enumerate(self.paths, start=1):
      for d in range(1, len(path)):
        ancestors[node, index[path[:d]]] = True
      ancestors[node, 0] = True
    wide = lambda a: jnp.broadcast_to(jnp.asarray(a), (batch,) + a.shape)
    return TreeBlock(tokens=tokens, parents=wide(parents.astype(np.int32)),
                     depths=wide(depths.astype(np.int32)),
                     valid=wide(np.ones(self.size, bool)),
                     ancestors=wide(ancestors))

  def expected_block(self, probabilities) -> float:
    """Tokens per call the tree expects: 1 + the sum of its nodes' path
    probabilities (see `best`)."""
    probabilities = np.asarray(probabilities, np.float64)
    return 1.0 + sum(math.prod(probabilities[j, r] for j, r in enumerate(p))
                     for p in self.paths)


@dataclasses.dataclass(frozen=True)
class DynamicTree:
  """A tree made anew at each call from the drafter's own confidence
  (EAGLE-2, Li et al. 2024); hashable: a compilation key.

  The shapes are fixed, the nodes are not. From the root, level by level
  down to `depth`, the `frontier` most probable nodes of the level (by
  path probability: the product of the drafter's probabilities along the
  path, an estimate of the chance the verifier accepts it) are expanded
  into their `top` most likely children each; of every node drafted, the
  `size` - 1 most probable are kept (a child is never more probable than
  its parent, so every kept node's parent is kept). Each example makes its
  own tree, with its own tree attention mask. `tree_growth.py` grows it.
  Under sampling a node's children are draws without replacement, the
  j-th scored as its j-th most likely token is, before anything is drawn,
  so that each node keeps a prefix of its draws (lossless).

  Attributes:
    size: N, nodes scored per call, the root included: 2 to `MAX_NODES`.
    depth: the most proposals on a path (k - 1).
    top: children drafted per expanded node.
    frontier: nodes expanded per level (the drafter's batch of nodes at
      each level for a drafter whose heads read each other's proposals).
    temperature: the drafter's logits are divided by it before its
      probabilities score the paths (1: as they are). Below 1 sharpens
      them, for a drafter less confident than it is right: exact
      verification accepts a draft token where it is the base's argmax,
      which a drafter trained on the base's own distribution matches far
      more often than its probability for it says.
  """
  size: int
  depth: int
  top: int = 8
  frontier: int = 8
  temperature: float = 1.0

  def __post_init__(self):
    if not (numeric.is_finite(self.temperature) and self.temperature > 0):
      raise ValueError(f'dynamic tree temperature={self.temperature!r} '
                       f'must be a finite number > 0.')
    object.__setattr__(self, 'temperature', float(self.temperature))
    for name in ('size', 'depth', 'top', 'frontier'):
      value = getattr(self, name)
      if not numeric.is_integer(value) or value < 1:
        raise ValueError(f'dynamic tree {name}={value!r} must be an '
                         f'integer >= 1.')
      object.__setattr__(self, name, int(value))
    if self.size < 2:
      raise ValueError(f'a tree of {self.size} nodes has no proposal.')
    check_size(self.size)
    if self.size - 1 > self.drafted:
      raise ValueError(
          f'a dynamic tree of {self.size} nodes keeps more nodes than its '
          f'depth {self.depth}, top {self.top} and frontier {self.frontier} '
          f'draft ({self.drafted}): a larger top or frontier, or fewer '
          f'nodes.')

  @classmethod
  def from_spec(cls, spec: str, depth: int) -> 'DynamicTree':
    """'dynamic:N' or 'dynamic:N,top=T,frontier=W,temperature=X' (each
    optional; defaults 8, 8, 1)."""
    head, _, rest = spec.partition(':')
    size, _, rest = rest.partition(',')
    try:
      if head != 'dynamic':
        raise ValueError
      size = int(size)
    except ValueError:
      raise ValueError(f'tree {spec!r} is not "dynamic:N" or '
                       f'"dynamic:N,top=T,frontier=W,temperature=X".'
                       ) from None
    return cls(depth=depth, size=size, **specs.options(
        spec, rest, {'top': int, 'frontier': int, 'temperature': float},
        'tree'))

  @property
  def widths(self) -> tuple[int, ...]:
    """Nodes expanded at each level, the root's (1) first: depth values."""
    return _expanded(self.depth, self.top, self.frontier)

  @property
  def drafted(self) -> int:
    """Nodes drafted per call below the root, before the rerank keeps
    `size` - 1 of them."""
    return sum(width * self.top for width in self.widths)

  @property
  def top_t(self) -> int:
    """Candidates read per expanded node."""
    return self.top

  @property
  def is_chain(self) -> bool:
    return False

  @property
  def spec(self) -> str:
    """The string `from_spec` reads back (defaults left out)."""
    extra = ''.join(f',{name}={getattr(self, name)}'
                    for name in ('top', 'frontier')
                    if getattr(self, name) != 8)
    if self.temperature != 1:
      extra += f',temperature={self.temperature:g}'
    return f'dynamic:{self.size}{extra}'


def is_dynamic(spec: str) -> bool:
  """Whether a tree spec names a `DynamicTree` ('dynamic:N...')."""
  return spec.startswith('dynamic')


def shallowest(spec: str) -> int:
  """The least depth (k - 1) a tree spec decodes at: its widths' count,
  or the depth whose levels first draft a dynamic tree's N - 1 nodes. A
  bad spec is a ValueError naming it."""
  if not is_dynamic(spec):
    depth = len(spec.split(','))
    Tree.from_spec(spec, depth)
    return depth
  tree = DynamicTree.from_spec(spec, MAX_NODES)  # Checked where it fits.
  return next(depth for depth in range(1, MAX_NODES + 1)
              if tree.top * sum(_expanded(depth, tree.top, tree.frontier))
              >= tree.size - 1)


def _expanded(depth: int, top: int, frontier: int) -> tuple[int, ...]:
  """A dynamic tree's nodes expanded at each of its `depth` levels, the
  root's (1) first: each level `top` times the last, at most
  `frontier`."""
  widths = [1]
  for _ in range(depth - 1):
    widths.append(min(frontier, widths[-1] * top))
  return tuple(widths)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TreeBlock:
  """The next call's tree, per example (part of the loop state).

  Attributes:
    tokens: [batch, N] node tokens; node 0 is the last accepted token.
    parents: [batch, N] each node's parent (the root's is itself; so is an
      unused node's parent the root).
    depths: [batch, N] each node's depth (0: the root).
    valid: [batch, N] bool, False for unused nodes (never accepted).
    ancestors: [batch, N, N] bool, ancestors[b, i, j]: node j is node i or
      one of its ancestors: what node i attends to among the tree's nodes.
  """
  tokens: jax.Array
  parents: jax.Array
  depths: jax.Array
  valid: jax.Array
  ancestors: jax.Array


def from_drafts(drafts: jax.Array, lengths, size: int) -> TreeBlock:
  """The tree of p drafts merged on their shared prefixes.

  Nodes are numbered draft by draft (the first draft's whole chain first),
  a node that repeats an earlier draft's prefix being that draft's node;
  nodes past `size` are dropped with everything under them (later drafts
  lose their ends first). Unused slots are invalid.

  Args:
    drafts: [batch, p, 1 + m]: every draft starts with the root token (the
      same for all p), then up to m proposals.
    lengths: p static ints, the proposals of each draft (<= m).
    size: N, nodes of the tree (root included).

  Returns:
    TreeBlock of N nodes.
  """
  batch, p, width = drafts.shape
  m = width - 1
  lengths = np.asarray(lengths)
  proposals = drafts[:, :, 1:]
  exists = np.arange(m)[None, :] < lengths[:, None]  # [p, m], static.
  same = proposals[:, :, None, :] == proposals[:, None, :, :]  # [b,p,p,m]
  # prefix[b, d, e, j]: drafts d and e agree on proposals 0..j.
  prefix = [same[..., 0]]
  for j in range(1, m):
    prefix.append(prefix[-1] & same[..., j])
  prefix = jnp.stack(prefix, axis=-1)
  earlier = np.tril(np.ones((p, p), bool), -1)  # [d, e]: e < d.
  repeats = (prefix & earlier[None, :, :, None]
             & exists[None, None, :, :] & exists[None, :, None, :])
  is_new = ~repeats.any(axis=2) & exists[None]  # [b, p, m]
  # Node ids in draft-major order, 1-based (the root is node 0).
  flat_new = is_new.reshape(batch, p * m)
  ids = (jnp.cumsum(flat_new, axis=1) * flat_new).reshape(batch, p, m)
  # A repeated node is the first earlier draft's with the same prefix.
  owner = jnp.where(repeats.any(axis=2), jnp.argmax(repeats, axis=2),
                    jnp.arange(p)[None, :, None])  # [b, p, m]
  node = jnp.take_along_axis(ids, owner, axis=1) if p > 1 else ids
  node = jnp.where(exists[None], node, 0)
  parent = jnp.concatenate([jnp.zeros((batch, p, 1), ids.dtype),
                            node[:, :, :-1]], axis=2)
  keep = is_new & (ids < size)
  slot = jnp.where(keep, ids, size).reshape(batch, p * m)  # size: dropped.
  rows = jnp.arange(batch)[:, None]
  scatter = lambda values, fill: jnp.full((batch, size + 1), fill,
                                          values.dtype).at[
      rows, slot].set(values.reshape(batch, p * m))[:, :size]
  depth = jnp.broadcast_to(jnp.arange(1, m + 1), (batch, p, m))
  tokens = scatter(proposals, 0).at[:, 0].set(drafts[:, 0, 0])
  parents = scatter(parent.astype(jnp.int32), 0)
  depths = scatter(depth.astype(jnp.int32), 0)
  valid = scatter(keep, False).at[:, 0].set(True)
  return TreeBlock(tokens=tokens.astype(drafts.dtype), parents=parents,
                   depths=depths, valid=valid,
                   ancestors=ancestor_matrix(parents, int(lengths.max())))


def ancestor_matrix(parents: jax.Array, depth: int) -> jax.Array:
  """[batch, N, N] bool: node j is node i or one of its ancestors.

  Args:
    parents: [batch, N] each node's parent (the root's is itself).
    depth: the tree's greatest depth (bounds the squarings).
  """
  n = parents.shape[1]
  reach = jax.nn.one_hot(parents, n, dtype=jnp.int32) | jnp.eye(
      n, dtype=jnp.int32)
  # Paths of length 2, 4, 8, ...: log2(depth) squarings reach the root.
  for _ in range(max(1, math.ceil(math.log2(depth + 1)))):
    reach = jnp.minimum(jnp.einsum('bij,bjk->bik', reach, reach), 1)
  return reach.astype(bool)


def verify(criterion: criteria_lib.Criterion, tree: TreeBlock,
           logits: jax.Array, scored: jax.Array, depth: int):
  """The deepest accepted node of each example's tree, and the path to it.

  Args:
    criterion: the verification criterion.
    tree: the tree the call scored.
    logits: [batch, N, vocab] the scoring model's logits at every node.
    scored: [batch, N] their argmax.
    depth: the tree's greatest depth D (static).

  Returns:
    (best [batch] node, accepted [batch] its depth: proposals accepted,
    path [batch, D + 1] the nodes from the root to it at depths 0..accepted,
    node 0 past it).
  """
  parent_best = jnp.take_along_axis(scored, tree.parents, axis=1)
  if isinstance(criterion, criteria_lib.Exact):
    right = tree.tokens == parent_best  # No logits needed.
  else:
    parent_logits = jnp.take_along_axis(logits, tree.parents[..., None],
                                        axis=1)
    right = criterion.accepts(tree.tokens, parent_logits, parent_best)
  right = (right & tree.valid).at[:, 0].set(True)
  # Accepted: the node and every ancestor right.
  accepted_node = jnp.all(right[:, None, :] | ~tree.ancestors, axis=-1)
  score = jnp.where(accepted_node, tree.depths, -1)
  best = ops.argmax(score)
  accepted = ops.take_at(tree.depths, best)
  on_path = ops.take_at(tree.ancestors, best)  # [batch, N]
  at_depth = (on_path[:, None, :]
              & (tree.depths[:, None, :] == jnp.arange(depth + 1)[:, None]))
  path = ops.argmax(at_depth.astype(jnp.int32))  # [batch, D + 1]
  return best, accepted, path
