"""Sampling over a token tree: several drafts verified so that the output
keeps the base model's distribution.

A tree's nodes below one parent are that parent's candidate next tokens.
Under sampling they are drawn from the drafter's distribution q for that
position WITHOUT replacement (`draw_children`: the first a draw from q, the
second a draw from q without the first, renormalised, ...), so a parent's
children, in node-index order, are that sequence of draws. `verify` walks
the tree from the root by recursive rejection sampling (Yang et al. 2024,
"Multi-Candidate Speculative Decoding"; Jeon et al. 2024, "Recursive
Speculative Decoding"):

- at node v the target is r = p_v, the warped base distribution of the
  token after v (the model's output at v);
- its valid children c_1, c_2, ... (tokens x_1, x_2, ...) are tried in
  order: q_j is q with x_1 .. x_{j-1} removed, renormalised; c_j is
  accepted with probability min(1, r(x_j) / q_j(x_j)), and the walk moves
  to c_j with r := p_{c_j};
- a rejection sets r := max(0, r - q_j), normalised, and the next child
  is tried;
- where every child is rejected, or v has none, the token after v is
  drawn from r (at a leaf, r = p_v).

Why the output has the base model's distribution. With one child this is
speculative sampling's rule (`sampling.py`): the token at this depth is
distributed as r. With several, induct over the children: given that
x_1 .. x_{j-1} were drawn and rejected, x_j is a draw from q_j (the draws
are without replacement, and the acceptance tests read only their own
uniforms and tokens), and the target is the residual r_j that the
rejections left. By the one-child argument, the token this depth takes
from "try c_j, else continue with the residual" is distributed as r_j;
so, backwards from the last child (after which the token is drawn from
the last residual), the depth's token is distributed as r_1 = p_v. Each
depth's token has p given the accepted path above it, and the chain rule
gives the sequence.

A point mass q (a deterministic draft, as a static tree's top-k
candidates: 0 at the token, -inf elsewhere) is the same rule with its q:
accepted with probability r(x), the residual r without x. Each child's
own log_q is the one read, so siblings that share a drafter's q (drawn
without replacement) and siblings that are each a point mass at their own
token both verify losslessly.

The functions are model-free: fixed shapes, vectorised over the batch,
jit-able, no host round trip.
"""

import dataclasses

import jax
import jax.numpy as jnp

from bpd_jax.decoding import tree as tree_lib
from bpd_jax.decoding.rejection import (accepted_proposals, draw,
                                        residual_log_probs)
from bpd_jax.infra import ops


def draw_children(keys: jax.Array, log_q: jax.Array,
                  count: int) -> tuple[jax.Array, jax.Array]:
  """`count` tokens per distribution, drawn without replacement.

  Gumbel-top-k: Gumbel noise added once to log q, the `count` largest taken
  in order, which is a sequence of draws without replacement (the first
  from q, the next from q without the earlier ones, renormalised).

  Args:
    keys: [batch] one key per example.
    log_q: [batch, W, vocab] log-distributions (-inf: probability 0).
    count: tokens per distribution (static), at most vocab.

  Returns:
    (tokens [batch, W, count] int32 in draw order, drawn [batch, W, count]
    bool: False where q had fewer than `count` tokens of positive
    probability and the slot's token has probability 0; the caller marks
    those nodes invalid).
  """
  vocab = log_q.shape[-1]
  if not 1 <= count <= vocab:
    raise ValueError(f'count={count} tokens without replacement must be 1 '
                     f'to the vocabulary size, {vocab}.')
  noise = jax.vmap(lambda key: jax.random.gumbel(key, log_q.shape[1:]))(keys)
  scores, tokens = jax.lax.top_k(log_q + noise, count)
  return tokens.astype(jnp.int32), scores > -jnp.inf


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class _Walk:
  """Loop state of `verify`: one try of one child per step.

  Attributes:
    node: [batch] the last accepted node (0: the root).
    accepted: [batch] its depth.
    path: [batch, D + 1] the accepted nodes at depths 0..accepted, 0 past.
    log_r: [batch, vocab] the target at `node`: p there, less the rejected
      children's q's.
    removed: [batch, vocab] bool, the tokens of `node`'s children tried so
      far (q_j is q without them).
    tried: [batch, N] bool, the nodes tried so far.
    stopped: [batch] bool, no child of `node` left to try: the token is
      drawn from log_r.
  """
  node: jax.Array
  accepted: jax.Array
  path: jax.Array
  log_r: jax.Array
  removed: jax.Array
  tried: jax.Array
  stopped: jax.Array


def _sibling_log_q(log_q: jax.Array,
                   removed: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(log q_j [batch, vocab]: q [batch, vocab] without the earlier-tried
  siblings' tokens `removed` [batch, vocab], renormalised; has_mass
  [batch] bool, False where nothing is left, as for a point mass at a
  token an earlier sibling already carried)."""
  q = jnp.where(removed, 0.0, jnp.exp(log_q))
  total = q.sum(axis=-1, keepdims=True)
  has_mass = total[:, 0] > 0
  return jnp.log(q / jnp.where(total > 0, total, 1.0)), has_mass


def verify(keys: jax.Array, tree: tree_lib.TreeBlock, log_p: jax.Array,
           log_q: jax.Array, depth: int):
  """The accepted path of each example's tree by recursive rejection
  sampling, and the token after it (see the module docstring).

  Args:
    keys: [batch] one key per example (this call's).
    tree: the tree the call scored; its invalid nodes are never tried.
      Children drawn without replacement are valid in a prefix of their
      draw order (as `draw_children`'s `drawn`): a valid child's q_j
      removes only the tokens of the valid siblings before it.
    log_p: [batch, N, vocab] the warped base log-distribution of the token
      after each node.
    log_q: [batch, N, vocab] the log-distribution each node's token was
      drawn from (its parent's children's q; a point mass for a
      deterministic draft); the root's is unused.
    depth: the tree's greatest depth D (static).

  Returns:
    (best [batch] the last accepted node, accepted [batch] its depth,
    path [batch, D + 1] the nodes from the root to it at depths
    0..accepted, node 0 past it, token [batch] int32 the token drawn after
    it).
  """
  batch, n, vocab = log_p.shape
  nodes = jnp.arange(n)
  # One uniform per node (each node is tried at most once), one key for
  # the last draw.
  coin_key, token_key = jnp.moveaxis(jax.vmap(jax.random.split)(keys), 1, 0)
  uniform = jax.vmap(lambda key: jax.random.uniform(key, (n,)))(coin_key)

  def try_child(_, walk: _Walk) -> _Walk:
    # The first valid, untried child of the current node (the root's
    # parent is itself, so a node is never its own child).
    is_child = (tree.valid & (tree.parents == walk.node[:, None])
                & (nodes != walk.node[:, None]) & ~walk.tried)
    has_child = is_child.any(axis=1) & ~walk.stopped
    child = ops.argmax(is_child.astype(jnp.int32))
    token = ops.take_at(tree.tokens, child)
    log_qj, has_mass = _sibling_log_q(ops.take_at(log_q, child),
                                      walk.removed)
    at_token = lambda log: jnp.take_along_axis(log, token[:, None],
                                               axis=1)[:, 0]
    tested = has_child & has_mass
    accept = tested & accepted_proposals(
        at_token(walk.log_r), at_token(log_qj), ops.take_at(uniform, child))
    reject = tested & ~accept
    accepted = walk.accepted + accept
    one_hot = jax.nn.one_hot(token, vocab, dtype=bool)
    log_r = jnp.where(reject[:, None],
                      residual_log_probs(walk.log_r, log_qj), walk.log_r)
    log_r = jnp.where(accept[:, None], ops.take_at(log_p, child), log_r)
    return _Walk(
        node=jnp.where(accept, child, walk.node),
        accepted=accepted,
        path=jnp.where(accept[:, None] & (jnp.arange(depth + 1)
                                          == accepted[:, None]),
                       child[:, None], walk.path),
        log_r=log_r,
        removed=jnp.where(accept[:, None], False,
                          walk.removed | (one_hot & reject[:, None])),
        tried=walk.tried | ((nodes == child[:, None]) & has_child[:, None]),
        stopped=walk.stopped | ~has_child)

  start = _Walk(
      node=jnp.zeros(batch, jnp.int32),
      accepted=jnp.zeros(batch, jnp.int32),
      path=jnp.zeros((batch, depth + 1), jnp.int32),
      log_r=log_p[:, 0],
      removed=jnp.zeros((batch, vocab), bool),
      tried=jnp.zeros((batch, n), bool),
      stopped=jnp.zeros(batch, bool))
  # Each step tries one node or stops: N - 1 steps try every node.
  walk = jax.lax.fori_loop(0, n - 1, try_child, start)
  return walk.node, walk.accepted, walk.path, draw(token_key, walk.log_r)
