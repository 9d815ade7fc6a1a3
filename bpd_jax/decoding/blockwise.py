"""Blockwise parallel decoding (Stern et al. 2018) in one `lax.while_loop`.

Each model call scores a block of k tokens per example: the last accepted
token (the scoring model's own, hence always right) followed by k - 1
proposals of heads 2..k. Head 1's outputs at the k positions verify the
proposals; the longest acceptable prefix is kept and head 1's token after it
is appended too, so a call appends 1..k tokens. The same call's outputs at
the last accepted position give the next block (combined scoring and
proposal): one model call per iteration, m tokens in 1 + ceil((m - 1) / k)
calls when every proposal is right, and never more calls than greedy.

Greedy decoding is this loop at k = 1 (one position a call, nothing
proposed or verified): the reference exact decoding must reproduce token
for token, with no loop of its own to keep in step (a separate greedy loop
cost the same per iteration). Sampling (`sampling.py`) runs its own step
over the same state: its first call (`start`), bookkeeping
(`accept`, with `append_accepted` and `advance`) and result (`result`)
are these.

Shapes are fixed: the output buffer is padded to max_len + k, every example
keeps its own length, a block is written at each example's own offset, and
the cache entries of rejected proposals are masked by position and later
overwritten. Finished examples ride along without changing.

Several drafts per call, a tree over the heads' candidates (a static
`tree.Tree`, or a `tree.DynamicTree` made each call from the drafter's
confidence, grown level by level by `tree_growth.py`) or the p drafts of a
`refine.Refinement` (Kim et al. 2024), are verified as one token tree
(`tree.py`): one call scores every node, the deepest accepted node wins,
and only its path's cache entries are moved into place. Trees and
refinement change what is proposed, never what is accepted.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp

from bpd_jax.decoding import criteria as criteria_lib
from bpd_jax.decoding import lookup as lookup_lib
from bpd_jax.decoding import options as options_lib
from bpd_jax.decoding import refine as refine_lib
from bpd_jax.decoding import steps
from bpd_jax.decoding import tree as tree_lib
from bpd_jax.decoding import tree_growth
from bpd_jax.decoding.types import Cache, DecodeResult, DecodingFns
from bpd_jax.infra import ops


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class BlockwiseState:
  """Loop state.

  Attributes:
    tokens: [batch, max_len + k] generated tokens, pad_id past each length.
    lengths: [batch] tokens generated (accepted) so far.
    done: [batch] bool, the example has produced an end id (eos_id or a
      stop id) or max_len tokens.
    block: the next call's draft: [batch, k], block[:, 0] the last
      accepted token (tokens[:, lengths - 1]), block[:, 1:] the proposals
      after it; or, verifying several drafts, a `tree.TreeBlock` (its root
      the last accepted token); or, sampling, a `sampling.SampledBlock`
      (the draft and the distributions it was drawn from).
    cache: the model's cache.
    model_calls: [batch] calls made while the example was unfinished.
    block_sizes: [batch, k + 1] histogram of tokens appended per call.
  """
  tokens: jax.Array
  lengths: jax.Array
  done: jax.Array
  block: jax.Array | tree_lib.TreeBlock
  cache: Cache
  model_calls: jax.Array
  block_sizes: jax.Array


def verify(criterion: criteria_lib.Criterion, proposals: jax.Array,
           logits: jax.Array, min_accepted: int,
           best: jax.Array | None = None,
           may_be_empty: bool = False) -> jax.Array:
  """Proposals accepted per example: the longest acceptable prefix.

  Args:
    criterion: the verification criterion.
    proposals: [batch, n] proposed tokens.
    logits: [batch, n, vocab] the scoring model's logits at the positions
      before them, each conditioned on the proposals before it.
    min_accepted: proposals taken even where verification fails.
    best: [batch, n] argmax of `logits`, if already taken.
    may_be_empty: slots may hold `lookup.NO_PROPOSAL` (a drafter needing
      no training): never accepted, whatever the criterion.

  Returns:
    [batch] accepted proposals.
  """
  passes = criterion.accepts(lookup_lib.model_tokens(proposals)
                             if may_be_empty else proposals, logits, best)
  if may_be_empty:
    passes = passes & lookup_lib.proposed(proposals)
  return criteria_lib.accepted_count(passes, min_accepted)


def blockwise_decode(fns: DecodingFns, cache: Cache, prompt: jax.Array,
                     prompt_lengths: jax.Array,
                     options: options_lib.DecodeOptions, *,
                     end_ids: tuple[int, ...], pad_id: int,
                     iterations: jax.Array | None = None,
                     rescore: refine_lib.Rescore | None = None,
                     ngram: lookup_lib.NgramDrafter | None = None,
                     searched: tuple[jax.Array, jax.Array] | None = None
                     ) -> DecodeResult:
  """Blockwise parallel decoding of a batch with per-example acceptance.

  Args:
    fns: the model's decoding functions; `proposal_logits` (or `draft`)
      gives heads 2..k (unused at k = 1); several drafts a call need
      `extend_tree` and `commit`.
    cache: an empty cache of `options.cache_positions(P)` positions.
    prompt: [batch, P] right-padded decoder prompts (bos_id alone for an
      encoder-decoder).
    prompt_lengths: [batch] valid prompt tokens per example, >= 1.
    options: the decode (argmax: no sampler), as `DecodeOptions.check`
      passed it: k = 1 is greedy decoding, the output exact blockwise
      decoding reproduces; `options.proposer` says how drafts are made.
    end_ids: the static ids that end an example (kept in the output):
      eos_id, then the model's stop ids.
    pad_id: filler past each example's end (-1 where no vocabulary id
      pads).
    iterations: exactly this many loop iterations (timing; see
      `steps.run_loop`); None: until every example has ended.
    rescore: the refinement's rescorer (`refine.Rescore`), if it has one.
    ngram: the n-gram model of an 'ngram' lookup drafter.
    searched: (tokens [batch, S], lengths [batch]) right-padded, what a
      lookup drafter searches before the output (an encoder-decoder's
      source and prompt: `lookup.history`); None: the prompt.

  Returns:
    DecodeResult with block_sizes of shape [batch, k + 1].
  """
  k, max_len = options.k, options.max_len
  lookup = functools.partial(_lookup_drafts, options.lookup, ngram,
                             *(searched or (prompt, prompt_lengths)))
  propose = {'heads': _plain_draft,
             'tree': functools.partial(_tree_drafts, options.tree),
             'refined': functools.partial(_refined_drafts,
                                          options.refinement, rescore),
             'lookup': lookup, 'lookup_tree': lookup,
             }[options.proposer]
  propose = functools.partial(propose, fns, k=k)
  ids = dict(k=k, max_len=max_len, end_ids=end_ids, pad_id=pad_id)
  state = start(fns, cache, prompt, prompt_lengths, ops.argmax, propose,
                **ids)
  if isinstance(state.block, tree_lib.TreeBlock):
    if fns.extend_tree is None or fns.commit is None:
      raise ValueError('several drafts a call need the model\'s '
                       'extend_tree and commit (DecodingFns).')
    step = functools.partial(_tree_step, fns, prompt_lengths, propose,
                             criterion=options.criterion, **ids)
  else:
    step = functools.partial(_blockwise_step, fns, prompt_lengths, propose,
                             criterion=options.criterion,
                             min_block=options.min_block,
                             may_be_empty=may_propose_nothing(options),
                             **ids)
  return result(steps.run_loop(step, state, iterations), max_len)


def may_propose_nothing(options: options_lib.DecodeOptions) -> bool:
  """Whether a draft's slots may be empty (`lookup.NO_PROPOSAL`): a
  drafter needing no training drafting alone."""
  return options.proposer == 'lookup' and options.lookup.heads == 'none'


def start(fns: DecodingFns, cache: Cache, prompt: jax.Array,
          prompt_lengths: jax.Array, choose, propose, *, k: int,
          max_len: int, end_ids: tuple[int, ...],
          pad_id: int) -> BlockwiseState:
  """The first call: the prompt pass, its token and the first draft.

  Shared by every loop (argmax and sampled): it yields the first token
  and proposes from the same outputs, so it counts as one call that
  appended one token.

  Args:
    fns, cache, prompt, prompt_lengths: as `blockwise_decode`'s.
    choose: head 1's logits [batch, vocab] -> the first tokens [batch]
      (argmax, or a draw).
    propose: (cache, features [batch, P, ...], next_tokens [batch, P],
      start [batch], last [batch], tokens, lengths) -> (the first draft,
      cache); see `_plain_draft`.
    k, max_len: the options'; end_ids, pad_id: as `blockwise_decode`'s.
  """
  batch = prompt.shape[0]
  features, cache = steps.prefill(fns, cache, prompt)
  first = choose(fns.next_token_logits(
      ops.take_at(features, prompt_lengths - 1)))
  tokens = jnp.full((batch, max_len + k), pad_id, jnp.int32).at[:, 0].set(
      first)
  lengths = jnp.ones((batch,), jnp.int32)
  block, cache = propose(
      cache, features,
      steps.prompt_next_tokens(prompt, prompt_lengths, first),
      jnp.zeros_like(prompt_lengths), prompt_lengths - 1, tokens, lengths)
  return BlockwiseState(
      tokens=tokens, lengths=lengths,
      done=steps.ends(first, end_ids) | (max_len == 1), block=block,
      cache=cache,
      model_calls=jnp.ones((batch,), jnp.int32),
      block_sizes=jnp.zeros((batch, k + 1), jnp.int32).at[:, 1].set(1))


def result(state: BlockwiseState, max_len: int) -> DecodeResult:
  """The loop's final state as a DecodeResult."""
  return DecodeResult(tokens=state.tokens[:, :max_len], lengths=state.lengths,
                      model_calls=state.model_calls,
                      block_sizes=state.block_sizes)


def _plain_draft(fns, cache, features, next_tokens, start, last, tokens,
                 lengths, *, k) -> tuple[jax.Array, Cache]:
  """([batch, k]: the accepted token, then heads 2..k's argmax after it;
  the cache).

  Args:
    fns: the model's decoding functions.
    cache: the model's cache.
    features: [batch, n, ...] the outputs of the positions just scored,
      from absolute position start [batch].
    next_tokens: [batch, n] the token after each (`steps.proposals`).
    last: [batch] index of the last accepted position; the scoring model's
      token after it is next_tokens at `last`.
    tokens, lengths: the output so far (read by refined drafts only).
    k: block size.
  """
  del tokens, lengths
  token = ops.take_at(next_tokens, last)
  if k == 1:
    return token[:, None], cache
  proposals, _, cache = steps.proposals(
      fns, cache, features, next_tokens, start, last,
      lambda index, logits: ops.argmax(logits))
  return jnp.concatenate([token[:, None], proposals], axis=1), cache


def _refined_drafts(refinement, rescore, fns, cache, features, next_tokens,
                    start, last, tokens, lengths, *, k):
  """The refinement's drafts (`refine.propose`): [batch, k] for one, else
  their tree (`tree.from_drafts`); the cache. Arguments as
  `_plain_draft`'s."""
  logits, cache = fns.proposal_logits(cache, features, next_tokens, start,
                                      last)
  drafts = refine_lib.propose(
      refinement, rescore, ops.take_at(next_tokens, last), logits,
      _history(refinement, tokens, lengths))
  if refinement.drafts == 1:
    return drafts[:, 0], cache
  return tree_lib.from_drafts(drafts, (k - 1,) * refinement.drafts,
                              refinement.tree_size(k)), cache


def _lookup_drafts(lookup, ngram, prompt, prompt_lengths, fns, cache,
                   features, next_tokens, start, last, tokens, lengths, *,
                   k):
  """The drafter needing no training's draft (`lookup.draft`) after the
  output so far: [batch, k], empty slots NO_PROPOSAL where it drafts
  alone, else filled with the heads' argmax; or, heads='tree', its draft
  and the heads' as one tree. Arguments as `_plain_draft`'s, and the
  text the lookup searches before the output (`prompt`, right-padded,
  `prompt_lengths` long)."""
  token = ops.take_at(next_tokens, last)[:, None]
  found = lookup_lib.draft(lookup, prompt, prompt_lengths, tokens, lengths,
                           k - 1, ngram)
  if lookup.heads == 'none':
    return jnp.concatenate([token, found], axis=1), cache
  heads, _, cache = steps.proposals(
      fns, cache, features, next_tokens, start, last,
      lambda index, logits: ops.argmax(logits))
  found = lookup_lib.filled(found, heads)
  if lookup.heads == 'fallback':
    return jnp.concatenate([token, found], axis=1), cache
  return lookup_lib.beside_heads(token[:, 0], heads, found), cache


def _tree_drafts(tree, fns, cache, features, next_tokens, start, last,
                 tokens, lengths, *, k) -> tuple[tree_lib.TreeBlock, Cache]:
  """The tree's nodes after the last accepted token, grown level by level
  (`tree_growth.py`): a static `Tree`'s ranks, or a `DynamicTree` made
  from the drafter's confidence. Arguments as `_plain_draft`'s."""
  del tokens, lengths
  growth = tree_growth.growth(tree)
  cache = tree_growth.grow(fns, growth, cache, features, next_tokens, start,
                           last, k - 1)
  return growth.block(ops.take_at(next_tokens, last)), cache


def _blockwise_step(fns, prompt_lengths, propose, state: BlockwiseState, *,
                    k, max_len, end_ids, pad_id, criterion, min_block,
                    may_be_empty) -> BlockwiseState:
  """One call: score the draft, accept the longest acceptable prefix,
  propose the next draft."""
  start = prompt_lengths + state.lengths - 1
  if may_be_empty:  # The drafter reads no features: logits alone.
    features = None
    logits, cache = steps.scored_logits(fns, state.cache, state.block,
                                        start, ~state.done)
  else:
    features, cache = fns.extend(state.cache, state.block, start)
    logits = fns.next_token_logits(features)  # [batch, k, vocab]
  # scored[:, j]: the scoring model's token after position j.
  scored = ops.argmax(logits)
  if k == 1:
    accepted = jnp.zeros_like(state.lengths)
  else:
    accepted = verify(criterion, state.block[:, 1:], logits[:, :-1],
                      min_block - 1, scored[:, :-1], may_be_empty)
  return accept(propose, state, state.block, accepted,
                 ops.take_at(scored, accepted), features, cache, start,
                 k=k, max_len=max_len, end_ids=end_ids, pad_id=pad_id)


def _tree_step(fns, prompt_lengths, propose, state: BlockwiseState, *, k,
               max_len, end_ids, pad_id, criterion) -> BlockwiseState:
  """One call: score every node of the tree, accept the deepest accepted
  node's path, move its cache entries into place, propose the next tree."""
  tree = state.block
  start = prompt_lengths + state.lengths - 1
  features, cache = fns.extend_tree(state.cache, tree.tokens, start,
                                    tree.depths, tree.ancestors)
  logits = fns.next_token_logits(features)  # [batch, N, vocab]
  scored = ops.argmax(logits)
  best, accepted, path = tree_lib.verify(criterion, tree, logits, scored,
                                         k - 1)
  cache = fns.commit(cache, start, path)
  rows = jnp.arange(path.shape[0])[:, None]
  return accept(propose, state, tree.tokens[rows, path], accepted,
                 ops.take_at(scored, best), features[rows, path], cache,
                 start, k=k, max_len=max_len, end_ids=end_ids, pad_id=pad_id)


def accept(propose, state, block, accepted, token, features, cache,
            start, *, k, max_len, end_ids, pad_id) -> BlockwiseState:
  """Appends a verified draft's accepted prefix and the token after it,
  and proposes the next draft (every loop's step ends here).

  Args:
    propose: the next draft after the call (`_plain_draft`'s arguments).
    block: [batch, k] the draft, its first token the last accepted one.
    accepted: [batch] its proposals accepted.
    token: [batch] the token after the last accepted one: the scoring
      model's, or a sampled decode's draw.
    features: [batch, k, ...] the call's outputs at the draft's positions.
    cache, start: the cache after the call, the draft's first position.
  """
  # The accepted proposals, then the scoring model's token after them.
  next_tokens = steps.block_next_tokens(block, accepted, token)
  tokens, lengths, done, count = append_accepted(
      state, next_tokens, accepted, k=k, max_len=max_len, end_ids=end_ids,
      pad_id=pad_id)
  # Combined scoring and proposal: the next drafts come from this call's
  # outputs at the last accepted position.
  next_block, cache = propose(cache, features, next_tokens, start,
                              accepted, tokens, lengths)
  return advance(state, tokens, lengths, done, count, next_block, cache, k)


def append_accepted(state: BlockwiseState, appended, accepted, *, k,
                    max_len, end_ids, pad_id):
  """Writes the accepted proposals and the scoring model's token after them.

  Args:
    state: the loop state before the call.
    appended: [batch, k] the tokens after each block position
      (`prompt.block_next_tokens`): the accepted proposals, then the
      scoring model's token; the first accepted + 1 are written.
    accepted: [batch] proposals accepted.
    k, max_len: the options'; end_ids, pad_id: as `blockwise_decode`'s.

  Returns:
    (tokens, lengths, done, count [batch] tokens appended).
  """
  position = jnp.arange(k)
  count = accepted + 1
  is_end = steps.ends(appended, end_ids) & (position < count[:, None])
  count = jnp.where(is_end.any(axis=1), jnp.argmax(is_end, axis=1) + 1, count)
  live = ~state.done
  count = jnp.where(live, jnp.minimum(count, max_len - state.lengths),
                    0).astype(jnp.int32)
  tokens = ops.write_at(
      state.tokens, jnp.where(position < count[:, None], appended, pad_id),
      state.lengths)
  lengths = state.lengths + count
  # An end cut off by max_len still ends the example: it reached max_len.
  done = state.done | is_end.any(axis=1) | (lengths >= max_len)
  return tokens, lengths, done, count


def advance(state, tokens, lengths, done, count, block, cache, k):
  """The next loop state, with this call counted for live examples."""
  live = ~state.done
  appended_here = jax.nn.one_hot(count, k + 1, dtype=jnp.int32)
  return BlockwiseState(
      tokens=tokens, lengths=lengths, done=done, block=block, cache=cache,
      model_calls=state.model_calls + live,
      block_sizes=state.block_sizes + appended_here * live[:, None])


def _history(refinement, tokens, lengths) -> jax.Array:
  """[batch, c]: the output's last c tokens, oldest first (start_id before
  its first token)."""
  c = refinement.context
  padded = jnp.concatenate(
      [jnp.full((tokens.shape[0], c), refinement.start_id, tokens.dtype),
       tokens], axis=1)
  return ops.slice_at(padded, lengths, c)
