"""Sampling from the base model, ancestral and blockwise, in one loop.

A `sampler.Sampler` warps the scoring model's logits (temperature, then
top-k, then top-p; each optional) into the distribution p a decode samples
from.

`blockwise_sample_decode` at k = 1 is ancestral sampling, the reference:
one model call per token, each token drawn from p. At k > 1 it draws the
heads' proposals from their own distributions q_i (the heads' logits
warped by the same Sampler), and verifies them with the rejection rule of
speculative sampling (Leviathan et al. 2023; Chen et al. 2023):

- proposal x_i is accepted with probability min(1, p_i(x_i) / q_i(x_i)),
  p_i the warped base distribution at its position;
- at the first rejection the token is drawn from the residual
  max(0, p_i - q_i), normalised;
- after a fully accepted block the extra token is drawn from p at the
  block's last position.

Why the output has exactly the base model's distribution. Take one
position i of a block, given that the tokens before it (the prefix, and
x_1 .. x_{i-1} if accepted) are what they are. With the paper's heads,
q_i is computed from the features at the block's start. It depends on the
accepted output up to there, and on nothing drawn in this block. x_i is
drawn from q_i independently of x_1 .. x_{i-1} and of their acceptance
draws, so conditioning on their acceptance leaves x_i ~ q_i. The
position's token is then

    P(t) = q_i(t) min(1, p_i(t) / q_i(t)) + P(reject) r_i(t)
         = min(q_i(t), p_i(t)) + (1 - sum_u min(q_i(u), p_i(u))) r_i(t),

and with r_i = (p_i - min(q_i, p_i)) / (1 - sum_u min(q_i(u), p_i(u))),
P(t) = p_i(t). This holds position by position, and each position's
token is drawn from p given the true prefix, so the whole sequence is
distributed as ancestral sampling from p: the chain rule.

Two more facts complete the argument:

- The first token of the next block, drawn from the residual or from p,
  follows the same rule.
- Ending at eos (or a stop id) or at max_len cuts the sequence as
  ancestral sampling cuts it.

Every one-pass drafter (the paper's heads, the block drafter) proposes
from the block's start alone; a dependent drafter's q_i (sequential heads,
the draft layer) depends on x_1 .. x_{i-1}, which were drawn before x_i,
so x_i ~ q_i(. | x_<i) given them, and the same computation holds given
the accepted prefix (each proposal's own q is the one carried).

Proposal rules (`Sampler.proposals`): 'draw' draws x_i from q_i, as
above; 'argmax' proposes the drafter's most likely token, a point mass q
at it: accepted with probability p(x_i), the residual p without x_i
renormalised. Both are the rule above with their q, so both keep p; the
argmax rule is the one drafters that are sharp but often wrong at
temperature 1 are reported to need (parallel drafters), as a draw from a
flat q is rarely the token p favours.

`criteria.Typical` (Medusa's typical acceptance) is the approximate
alternative: the heads' argmax drafts, accepted where p(x) exceeds
min(eps, delta * exp(-H(p))), then a token drawn from p. It is faster on
flat distributions but does not preserve them.

A tree of drafts (`tree.Tree`, or a `tree.DynamicTree` made each call) is
sampled over losslessly too: a node's children are draws without
replacement from the drafter's q at that node, verified by recursive
rejection sampling (`tree_sampling.py`, where the argument is); a dynamic
tree keeps a prefix of each node's draws, chosen before they are drawn
(`tree_growth.DynamicGrowth`).

Randomness: each example has its own key; call c of the decode draws
from fold_in(key, c), so an example samples as it would alone with its
key, whatever the batch, the sharding or the other examples' lengths.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp

from bpd_jax.decoding import blockwise as blockwise_lib
from bpd_jax.decoding import criteria as criteria_lib
from bpd_jax.decoding import lookup as lookup_lib
from bpd_jax.decoding import options as options_lib
from bpd_jax.decoding import steps
from bpd_jax.decoding import tree as tree_lib
from bpd_jax.decoding import tree_growth
from bpd_jax.decoding import tree_sampling
from bpd_jax.decoding.rejection import (accepted_proposals, draw, point_mass,
                                        residual_log_probs)
from bpd_jax.decoding.sampler import Sampler
from bpd_jax.decoding.types import Cache, DecodeResult, DecodingFns
from bpd_jax.infra import numeric
from bpd_jax.infra import ops


def example_keys(key, batch: int) -> jax.Array:
  """[batch] keys: one per example from an int seed or one key; a [batch]
  array of keys is returned as it is."""
  if numeric.is_integer(key):
    # What jax.random.key takes (a larger int is an OverflowError there).
    if not -2**63 <= key < 2**63:
      raise ValueError(f'key={key!r}: an int seed must be in [-2**63, '
                       f'2**63).')
    key = jax.random.key(int(key))
  if not (isinstance(key, jax.Array)
          and jnp.issubdtype(key.dtype, jax.dtypes.prng_key)):
    raise ValueError(f'key={key!r} is not an int seed or a jax.random.key '
                     f'(one, or one per example).')
  if key.shape == ():
    return jax.random.split(key, batch)
  if key.shape != (batch,):
    raise ValueError(f'keys of shape {key.shape} do not match a batch of '
                     f'{batch} (one key, or one per example).')
  return key


def _call_keys(keys: jax.Array, call: jax.Array, parts: int) -> jax.Array:
  """[batch, parts] keys of one model call: fold_in(key, call), split."""
  return jax.vmap(lambda key: jax.random.split(
      jax.random.fold_in(key, call), parts))(keys)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SampledBlock:
  """A sampled decode's next draft (`BlockwiseState.block`).

  Attributes:
    tokens: [batch, k] the last accepted token, then the proposals.
    log_q: [batch, k - 1, vocab] the warped log-distributions the proposals
      were drawn from (a point mass for argmax proposals; [batch, k - 1,
      1] under typical acceptance, which takes the heads' argmax, and for
      a lookup drafting alone, whose point masses are made where they
      are verified).
  """
  tokens: jax.Array
  log_q: jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SampledTree:
  """A sampled decode's next tree of drafts (`BlockwiseState.block`).

  Attributes:
    tree: the nodes; a node's children are its first draws without
      replacement from the drafter's q (argmax proposals: its most likely
      tokens), in draw order.
    log_q: [batch, N, vocab] the warped log-distribution each node was
      drawn from (its parent's q; a point mass at the node's token for
      argmax proposals); node 0's is unread.
  """
  tree: tree_lib.TreeBlock
  log_q: jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SamplingState:
  """Loop state of a sampled decode.

  Attributes:
    inner: the blockwise loop's state (tokens, lengths, done, the
      `SampledBlock`, cache, statistics).
    keys: [batch] the examples' keys.
    call: the model calls made so far (the next call's index).
  """
  inner: blockwise_lib.BlockwiseState
  keys: jax.Array
  call: jax.Array

  @property
  def done(self) -> jax.Array:
    return self.inner.done


def blockwise_sample_decode(fns: DecodingFns, cache: Cache,
                            prompt: jax.Array, prompt_lengths: jax.Array,
                            options: options_lib.DecodeOptions,
                            sampler: Sampler, keys: jax.Array, *,
                            end_ids: tuple[int, ...], pad_id: int,
                            iterations: jax.Array | None = None,
                            ngram: lookup_lib.NgramDrafter | None = None,
                            searched: tuple[jax.Array, jax.Array] | None
                            = None) -> DecodeResult:
  """Blockwise sampling: the base model's distribution, k tokens a call at
  best (see the module docstring for the rule and why it is exact); k = 1
  is ancestral sampling.

  Args:
    fns, cache, prompt, prompt_lengths, end_ids, pad_id, iterations,
      searched: as `blockwise.blockwise_decode`'s.
    options: the decode, as `DecodeOptions.check` passed it (sampling):
      its k (1: ancestral sampling), max_len, criterion (Exact: the
      rejection rule, the base's distribution; Typical: Medusa's typical
      acceptance of argmax drafts, approximate) and its sampler's proposal
      rule; the sampler's numbers come traced, as `sampler`.
    sampler: the warping (temperature > 0), of the base and the heads.
    keys: [batch] one key per example (`example_keys`).
    ngram: the n-gram model of an 'ngram' lookup drafter.

  Returns:
    DecodeResult with block_sizes of shape [batch, k + 1].
  """
  k, max_len, criterion = options.k, options.max_len, options.criterion
  first_key, draft_key = jnp.moveaxis(_call_keys(keys, 0, 2), 1, 0)
  searched = searched or (prompt, prompt_lengths)
  propose = functools.partial(
      _proposals, fns, sampler, criterion,
      options.lookup if options.proposer == 'lookup' else None, ngram,
      *searched, k=k)
  tree = options.proposer in ('tree', 'lookup_tree')
  if tree and (fns.extend_tree is None or fns.commit is None):
    raise ValueError('several drafts a call need the model\'s extend_tree '
                     'and commit (DecodingFns).')
  if options.proposer == 'tree':
    propose = functools.partial(_tree_proposals, options.tree, fns, sampler,
                                k=k)
  elif options.proposer == 'lookup_tree':
    propose = functools.partial(_lookup_tree_proposals, fns, sampler,
                                options.lookup, ngram, *searched, k=k)
  inner = blockwise_lib.start(
      fns, cache, prompt, prompt_lengths,
      lambda logits: draw(first_key, sampler.log_probs(logits)),
      functools.partial(propose, keys=draft_key),
      k=k, max_len=max_len, end_ids=end_ids, pad_id=pad_id)
  state = SamplingState(inner, keys, jnp.ones((), jnp.int32))
  ids = dict(k=k, max_len=max_len, end_ids=end_ids, pad_id=pad_id)
  if tree:
    step = functools.partial(_tree_sampling_step, fns, prompt_lengths,
                             sampler, propose, **ids)
  else:
    step = functools.partial(
        _sampling_step, fns, prompt_lengths, sampler, criterion, propose,
        may_be_empty=blockwise_lib.may_propose_nothing(options), **ids)
  return blockwise_lib.result(
      steps.run_loop(step, state, iterations).inner, max_len)


def _proposals(fns, sampler, criterion, lookup, ngram, prompt,
               prompt_lengths, cache, features, next_tokens, start, last,
               tokens, lengths, *, keys, k) -> tuple[SampledBlock, Cache]:
  """(the next block: the token after the last accepted position, then
  heads 2..k's proposals, with the log-distributions they were drawn from;
  the cache). The other arguments are `steps.proposals`', and the output
  so far (tokens, lengths) and prompt a `lookup.Lookup` drafter reads.

  The rejection rule draws proposals from the warped heads, or takes
  their argmax (sampler.proposals 'argmax': a point-mass q); typical
  acceptance takes their argmax (its log_q is unused). A lookup's
  proposals are fixed by the output so far: point masses, the heads'
  proposal and its q in the slots it leaves empty if the heads take part
  (heads='fallback'), else empty slots (`lookup.NO_PROPOSAL`).
  """
  token = ops.take_at(next_tokens, last)
  if k == 1:
    return SampledBlock(token[:, None],
                        jnp.zeros((token.shape[0], 0, 1))), cache
  if lookup is None:
    return _heads_proposals(fns, sampler, criterion, cache, features,
                            next_tokens, start, last, keys, token)
  found = lookup_lib.draft(lookup, prompt, prompt_lengths, tokens, lengths,
                           k - 1, ngram)
  if lookup.heads == 'none':  # Point masses, made where verified.
    return SampledBlock(jnp.concatenate([token[:, None], found], axis=1),
                        jnp.zeros(found.shape + (1,))), cache
  heads, cache = _heads_proposals(fns, sampler, criterion, cache, features,
                                  next_tokens, start, last, keys, token)
  taken = lookup_lib.proposed(found)
  found = jnp.where(taken, found, heads.tokens[:, 1:])
  log_q = heads.log_q
  if log_q.shape[-1] > 1:  # The rejection rule's q (typical reads none).
    log_q = jnp.where(taken[..., None],
                      point_mass(found, log_q.shape[-1]), log_q)
  return SampledBlock(jnp.concatenate([token[:, None], found], axis=1),
                      log_q), cache


def _heads_proposals(fns, sampler, criterion, cache, features, next_tokens,
                     start, last, keys, token) -> tuple[SampledBlock, Cache]:
  """The heads' part of `_proposals`: the block after `token` [batch]."""
  typical = isinstance(criterion, criteria_lib.Typical)
  if typical or sampler.proposals == 'argmax':
    choose = lambda index, logits: ops.argmax(logits)
  else:
    # Dependent heads draw position by position: each its own key.
    choose = lambda index, logits: draw(
        keys if index == 0 else jax.vmap(jax.random.fold_in, (0, None))(
            keys, index), sampler.log_probs(logits))
  proposals, logits, cache = steps.proposals(
      fns, cache, features, next_tokens, start, last, choose)
  if typical:
    log_q = jnp.zeros(logits.shape[:2] + (1,))
  else:
    log_q = proposal_log_q(sampler, proposals, logits)
  return SampledBlock(jnp.concatenate([token[:, None], proposals], axis=1),
                      log_q), cache


def proposal_log_q(sampler: Sampler, proposals: jax.Array,
                   logits: jax.Array) -> jax.Array:
  """[batch, k - 1, vocab] the log-distribution each proposal [batch,
  k - 1] was chosen from: the warped drafter's (`logits` [batch, k - 1,
  vocab]) for drawn proposals, a point mass at the token (0 there, -inf
  elsewhere) for argmax ones."""
  if sampler.proposals == 'argmax':
    return point_mass(proposals, logits.shape[-1])
  return sampler.log_probs(logits)


def _tree_proposals(tree, fns, sampler, cache, features, next_tokens, start,
                    last, tokens, lengths, *, keys, k
                    ) -> tuple[SampledTree, Cache]:
  """The next tree of a `tree.Tree` or a `tree.DynamicTree` under
  sampling, grown level by level (`tree_growth.py`): each node's children
  its first draws without replacement from the warped drafter
  (`tree_sampling.draw_children`; a dynamic tree keeps a prefix of each
  node's draws), or its most likely tokens for argmax proposals (point
  masses). Arguments as `_proposals`'."""
  del tokens, lengths
  argmax = sampler.proposals == 'argmax'

  def choose(level, logits, count):
    if argmax:
      return tree_growth.greedy_children(level, logits, count)
    return tree_sampling.draw_children(
        jax.vmap(jax.random.fold_in, (0, None))(keys, level),
        sampler.log_probs(logits), count)

  growth = tree_growth.growth(tree, choose, draws=not argmax)
  cache = tree_growth.grow(fns, growth, cache, features, next_tokens, start,
                           last, k - 1)
  block = growth.block(ops.take_at(next_tokens, last))
  return SampledTree(block, proposal_log_q(sampler, block.tokens,
                                           growth.node_logits())), cache


def _lookup_tree_proposals(fns, sampler, lookup, ngram, prompt,
                           prompt_lengths, cache, features, next_tokens,
                           start, last, tokens, lengths, *, keys, k
                           ) -> tuple[SampledTree, Cache]:
  """The heads' draft (drawn from their q, or their argmax) and the
  lookup's (point masses; the heads' tokens in its empty slots) as one
  tree (`tree.from_drafts`, the heads' chain first). A node keeps the q
  it was chosen by: the heads' chain its q, every node only the lookup
  drafted a point mass at its token, which is lossless for any token
  fixed before the call's coins are drawn (`tree_sampling.py`).
  Arguments as `_proposals`'."""
  token = ops.take_at(next_tokens, last)
  heads, cache = _heads_proposals(fns, sampler, criteria_lib.Exact(), cache,
                                  features, next_tokens, start, last, keys,
                                  token)
  found = lookup_lib.filled(
      lookup_lib.draft(lookup, prompt, prompt_lengths, tokens, lengths,
                       k - 1, ngram), heads.tokens[:, 1:])
  block = lookup_lib.beside_heads(token, heads.tokens[:, 1:], found)
  # Nodes 1..k - 1 are the heads' chain.
  log_q = jnp.concatenate(
      [heads.log_q[:, :1], heads.log_q,
       point_mass(block.tokens[:, k:], heads.log_q.shape[-1])], axis=1)
  return SampledTree(block, log_q), cache


def _tree_sampling_step(fns, prompt_lengths, sampler, propose,
                        state: SamplingState, *, k, max_len, end_ids,
                        pad_id) -> SamplingState:
  """One call over a tree: score every node, walk it by recursive
  rejection sampling (`tree_sampling.verify`), move the accepted path's
  cache entries into place, draw the next tree."""
  inner = state.inner
  tree = inner.block.tree
  start = prompt_lengths + inner.lengths - 1
  features, cache = fns.extend_tree(inner.cache, tree.tokens, start,
                                    tree.depths, tree.ancestors)
  log_p = sampler.log_probs(fns.next_token_logits(features))  # [b, N, V]
  verify_key, draft_key = jnp.moveaxis(
      _call_keys(state.keys, state.call, 2), 1, 0)
  _, accepted, path, token = tree_sampling.verify(
      verify_key, tree, log_p, inner.block.log_q, k - 1)
  cache = fns.commit(cache, start, path)
  rows = jnp.arange(path.shape[0])[:, None]
  inner = blockwise_lib.accept(
      functools.partial(propose, keys=draft_key), inner,
      tree.tokens[rows, path], accepted, token, features[rows, path], cache,
      start, k=k, max_len=max_len, end_ids=end_ids, pad_id=pad_id)
  return SamplingState(inner, state.keys, state.call + 1)


def _sampling_step(fns, prompt_lengths, sampler, criterion, propose,
                   state: SamplingState, *, k, max_len, end_ids,
                   pad_id, may_be_empty) -> SamplingState:
  """One call: score the block, accept by the rule, draw the token after
  the accepted proposals, draw the next block's proposals."""
  inner = state.inner
  block = inner.block.tokens  # [batch, k]
  draft_log_q = inner.block.log_q  # [batch, k - 1, vocab]
  start = prompt_lengths + inner.lengths - 1
  if may_be_empty:  # The drafter reads no features: logits alone.
    features = None
    logits, cache = steps.scored_logits(fns, inner.cache, block, start,
                                        ~inner.done)
  else:
    features, cache = fns.extend(inner.cache, block, start)
    logits = fns.next_token_logits(features)
  log_p = sampler.log_probs(logits)  # [batch, k, vocab]
  if may_be_empty:  # A lookup drafting alone: point masses at its tokens.
    draft_log_q = point_mass(lookup_lib.model_tokens(block[:, 1:]),
                             log_p.shape[-1])
  coin_key, token_key, draft_key = jnp.moveaxis(
      _call_keys(state.keys, state.call, 3), 1, 0)
  if k == 1:
    accepted = jnp.zeros_like(inner.lengths)
    after = log_p[:, 0]
  else:
    proposals = lookup_lib.model_tokens(block[:, 1:])
    if isinstance(criterion, criteria_lib.Typical):
      passes = criterion.accepts(proposals, log_p[:, :-1])
    else:
      log_p_x = jnp.take_along_axis(log_p[:, :-1], proposals[..., None],
                                    axis=-1)[..., 0]
      log_q_x = jnp.take_along_axis(draft_log_q, proposals[..., None],
                                    axis=-1)[..., 0]
      uniform = jax.vmap(lambda key: jax.random.uniform(key, (k - 1,)))(
          coin_key)
      passes = accepted_proposals(log_p_x, log_q_x, uniform)
    if may_be_empty:  # An empty slot is no proposal, and no rejection.
      passes = passes & lookup_lib.proposed(block[:, 1:])
    accepted = criteria_lib.accepted_count(passes)
    after = ops.take_at(log_p, accepted)  # [batch, vocab]
    if not isinstance(criterion, criteria_lib.Typical):  # Medusa: p itself.
      # A rejection's residual; after a fully accepted block (or before an
      # empty slot) p itself.
      slot = jnp.minimum(accepted, k - 2)
      rejected = accepted < k - 1
      if may_be_empty:
        rejected = rejected & lookup_lib.proposed(ops.take_at(block[:, 1:],
                                                              slot))
      after = jnp.where(rejected[:, None],
                        residual_log_probs(after, ops.take_at(draft_log_q,
                                                              slot)), after)
  # The token after the accepted proposals: one draw per example.
  inner = blockwise_lib.accept(
      functools.partial(propose, keys=draft_key), inner, block, accepted,
      draw(token_key, after), features, cache, start, k=k, max_len=max_len,
      end_ids=end_ids, pad_id=pad_id)
  return SamplingState(inner, state.keys, state.call + 1)
