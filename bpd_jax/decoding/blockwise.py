"""Blockwise parallel decoding (Stern et al. 2018) in one `lax.while_loop`.

Each model call scores a block of k tokens per example: the last accepted
token (the scoring model's own, hence always right) followed by k - 1
proposals of heads 2..k. Head 1's outputs at the k positions verify the
proposals; the longest acceptable prefix is kept and head 1's token after it
is appended too, so a call appends 1..k tokens. The same call's outputs at
the last accepted position give the next block (combined scoring and
proposal): one model call per iteration, m tokens in 1 + ceil((m - 1) / k)
calls when every proposal is right, and never more calls than greedy.

Shapes are fixed: the output buffer is padded to max_len + k, every example
keeps its own length, a block is written at each example's own offset, and
the cache entries of rejected proposals are masked by position and later
overwritten. Finished examples ride along without changing.

With a `refine.Refinement`, each call verifies p drafts per example (Kim et
al. 2024): the drafts are folded into the batch (the cache keeps one row per
draft), the draft with the longest accepted prefix wins, and its cache rows
are copied over the others' for the next call. Refinement changes what is
proposed, never what is accepted.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp

from bpd_jax import ops
from bpd_jax.decoding import criteria as criteria_lib
from bpd_jax.decoding import prompt as prompt_lib
from bpd_jax.decoding import refine as refine_lib
from bpd_jax.decoding.types import Cache, DecodeResult, DecodingFns


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class BlockwiseState:
  """Loop state.

  Attributes:
    tokens: [batch, max_len + k] generated tokens, pad_id past each length.
    lengths: [batch] tokens generated (accepted) so far.
    done: [batch] bool, the example has produced eos_id or max_len tokens.
    block: [batch, k] the next call's input: block[:, 0] is the last accepted
      token (tokens[:, lengths - 1]), block[:, 1:] the proposals after it.
      With refinement [batch, p, k]: p such drafts.
    cache: the model's cache (with refinement: batch * p rows, draft-minor).
    model_calls: [batch] calls made while the example was unfinished.
    block_sizes: [batch, k + 1] histogram of tokens appended per call.
  """
  tokens: jax.Array
  lengths: jax.Array
  done: jax.Array
  block: jax.Array
  cache: Cache
  model_calls: jax.Array
  block_sizes: jax.Array


def verify(criterion: criteria_lib.Criterion, drafts: jax.Array,
           logits: jax.Array, min_accepted: int,
           best: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
  """Picks, per example, the candidate draft with the longest accepted prefix.

  Written for several candidates per example (the top-p refined drafts of
  Kim et al. 2024); the decoding loop passes one.

  Args:
    criterion: the verification criterion.
    drafts: [batch, candidates, n] proposed tokens.
    logits: [batch, candidates, n, vocab] the scoring model's logits at the
      positions of the drafts, each conditioned on its own draft.
    min_accepted: proposals taken even where verification fails.
    best: [batch, candidates, n] argmax of `logits`, if already taken.

  Returns:
    (chosen candidate [batch], accepted proposals of it [batch]).
  """
  counts = criteria_lib.accepted_count(
      criterion.accepts(drafts, logits, best), min_accepted)
  choice = jnp.argmax(counts, axis=-1)
  return choice, jnp.max(counts, axis=-1)


def blockwise_decode(fns: DecodingFns, cache: Cache, prompt: jax.Array,
                     prompt_lengths: jax.Array, *, k: int, max_len: int,
                     eos_id: int, pad_id: int,
                     criterion: criteria_lib.Criterion = criteria_lib.Exact(),
                     min_block: int = 1,
                     iterations: jax.Array | None = None,
                     refinement: refine_lib.Refinement | None = None,
                     rescore: refine_lib.Rescore | None = None
                     ) -> DecodeResult:
  """Blockwise parallel decoding of a batch with per-example acceptance.

  Args:
    fns: the model's decoding functions; `proposal_logits` gives heads 2..k.
    cache: an empty cache of `prompt.required_positions(P, max_len, k)`.
    prompt: [batch, P] right-padded decoder prompts (bos_id alone for an
      encoder-decoder).
    prompt_lengths: [batch] valid prompt tokens per example, >= 1.
    k: block size: tokens scored per call, >= 1 (1 is greedy decoding).
    max_len: most tokens to generate per example, >= 1.
    eos_id: end-of-sequence id (kept in the output).
    pad_id: filler past each example's end.
    criterion: verification criterion; Exact() reproduces greedy decoding.
    min_block: l, the fewest tokens a call appends (1 <= l <= k); l > 1
      accepts the first l - 1 proposals unverified.
    iterations: exactly this many loop iterations (timing; see
      `prompt.run_loop`); None: until every example has ended.
    refinement: draft refinement (several drafts verified per call); None,
      or options that propose what plain decoding proposes (one draft, no
      rescoring), run the plain loop.
    rescore: the refinement's rescorer (`refine.Rescore`), if it has one.

  Returns:
    DecodeResult with block_sizes of shape [batch, k + 1].
  """
  if not 1 <= min_block <= k:
    raise ValueError(f'min_block={min_block} must be in [1, k={k}].')
  batch = prompt.shape[0]
  last, cache = prompt_lib.prefill(fns, cache, prompt, prompt_lengths)
  first = prompt_lib.argmax(fns.next_token_logits(last))
  options = dict(k=k, max_len=max_len, eos_id=eos_id, pad_id=pad_id,
                 criterion=criterion, min_block=min_block)
  if refinement is not None and not refinement.is_plain and k > 1:
    state = _refined_start(fns, cache, first, last, refinement, rescore,
                           k=k, max_len=max_len, eos_id=eos_id,
                           pad_id=pad_id)
    step = functools.partial(_refined_step, fns, prompt_lengths, refinement,
                             rescore, **options)
    return _result(prompt_lib.run_loop(step, state, iterations), max_len)
  state = BlockwiseState(
      tokens=jnp.full((batch, max_len + k), pad_id, jnp.int32)
      .at[:, 0].set(first),
      lengths=jnp.ones((batch,), jnp.int32),
      done=(first == eos_id) | (max_len == 1),
      block=_next_block(fns, first, last, k),
      cache=cache,
      model_calls=jnp.ones((batch,), jnp.int32),
      block_sizes=jnp.zeros((batch, k + 1), jnp.int32).at[:, 1].set(1))

  state = prompt_lib.run_loop(
      functools.partial(_blockwise_step, fns, prompt_lengths, **options),
      state, iterations)
  return _result(state, max_len)


def _result(state: BlockwiseState, max_len: int) -> DecodeResult:
  return DecodeResult(tokens=state.tokens[:, :max_len], lengths=state.lengths,
                      model_calls=state.model_calls,
                      block_sizes=state.block_sizes)


def _next_block(fns, token, features, k) -> jax.Array:
  """[batch, k]: the accepted token, then heads 2..k's proposals after it."""
  if k == 1:
    return token[:, None]
  proposals = prompt_lib.argmax(fns.proposal_logits(features))
  return jnp.concatenate([token[:, None], proposals], axis=1)


def _blockwise_step(fns, prompt_lengths, state: BlockwiseState, *, k, max_len,
                    eos_id, pad_id, criterion, min_block) -> BlockwiseState:
  """One call: score the block, accept a prefix, propose the next block."""
  features, cache = fns.extend(state.cache, state.block,
                               prompt_lengths + state.lengths - 1)
  logits = fns.next_token_logits(features)  # [batch, k, vocab]
  # scored[:, j]: the scoring model's token after block[:, j].
  scored = prompt_lib.argmax(logits)
  if k == 1:
    accepted = jnp.zeros_like(state.lengths)
  else:
    _, accepted = verify(criterion, state.block[:, None, 1:],
                         logits[:, None, :-1], min_block - 1,
                         scored[:, None, :-1])
  tokens, lengths, done, count = _append(state, state.block, scored,
                                         accepted, k=k, max_len=max_len,
                                         eos_id=eos_id, pad_id=pad_id)

  # Combined scoring and proposal: the next block comes from this call's
  # outputs at the last accepted position, one position per example.
  block = _next_block(fns, ops.take_at(scored, accepted),
                      ops.take_at(features, accepted), k)
  return _advance(state, tokens, lengths, done, count, block, cache, k)


def _append(state: BlockwiseState, block, scored, accepted, *, k, max_len,
            eos_id, pad_id):
  """Writes the accepted proposals and the scoring model's token after them.

  Args:
    state: the loop state before the call.
    block: [batch, k] the verified draft (its first token already accepted).
    scored: [batch, k] the scoring model's token after each draft position.
    accepted: [batch] proposals accepted.

  Returns:
    (tokens, lengths, done, count [batch] tokens appended).
  """
  position = jnp.arange(k)
  appended = jnp.where(position < accepted[:, None],
                       jnp.roll(block, -1, axis=1), scored)
  count = accepted + 1
  is_eos = (appended == eos_id) & (position < count[:, None])
  count = jnp.where(is_eos.any(axis=1), jnp.argmax(is_eos, axis=1) + 1, count)
  live = ~state.done
  count = jnp.where(live, jnp.minimum(count, max_len - state.lengths),
                    0).astype(jnp.int32)
  tokens = ops.write_at(
      state.tokens, jnp.where(position < count[:, None], appended, pad_id),
      state.lengths)
  lengths = state.lengths + count
  # An eos cut off by max_len still ends the example: it reached max_len.
  done = state.done | is_eos.any(axis=1) | (lengths >= max_len)
  return tokens, lengths, done, count


def _advance(state, tokens, lengths, done, count, block, cache, k):
  """The next loop state, with this call counted for live examples."""
  live = ~state.done
  appended_here = jax.nn.one_hot(count, k + 1, dtype=jnp.int32)
  return BlockwiseState(
      tokens=tokens, lengths=lengths, done=done, block=block, cache=cache,
      model_calls=state.model_calls + live,
      block_sizes=state.block_sizes + appended_here * live[:, None])


# --- Refined drafts: p per example, verified in the same call.


def _history(refinement, tokens, lengths) -> jax.Array:
  """[batch, c]: the output's last c tokens, oldest first (start_id before
  its first token)."""
  c = refinement.context
  padded = jnp.concatenate(
      [jnp.full((tokens.shape[0], c), refinement.start_id, tokens.dtype),
       tokens], axis=1)
  return ops.slice_at(padded, lengths, c)


def _take_rows(fns, cache, rows):
  if fns.take_rows is not None:
    return fns.take_rows(cache, rows)
  return jax.tree.map(lambda x: x[rows], cache)


def _refined_start(fns, cache, first, last, refinement, rescore, *, k,
                   max_len, eos_id, pad_id) -> BlockwiseState:
  """The loop state after the prompt pass, with the cache row per draft."""
  batch, p = first.shape[0], refinement.drafts
  tokens = jnp.full((batch, max_len + k), pad_id, jnp.int32).at[:, 0].set(
      first)
  lengths = jnp.ones((batch,), jnp.int32)
  block = refine_lib.propose(refinement, rescore, first,
                             fns.proposal_logits(last),
                             _history(refinement, tokens, lengths))
  return BlockwiseState(
      tokens=tokens, lengths=lengths,
      done=(first == eos_id) | (max_len == 1), block=block,
      # Every leaf replicated (an encoder's memory too); later calls move
      # rows within an example only (`DecodingFns.take_rows`).
      cache=jax.tree.map(lambda x: jnp.repeat(x, p, axis=0), cache),
      model_calls=jnp.ones((batch,), jnp.int32),
      block_sizes=jnp.zeros((batch, k + 1), jnp.int32).at[:, 1].set(1))


def _refined_step(fns, prompt_lengths, refinement, rescore,
                  state: BlockwiseState, *, k, max_len, eos_id, pad_id,
                  criterion, min_block) -> BlockwiseState:
  """One call verifying p drafts per example; the longest accepted wins."""
  batch, p, _ = state.block.shape
  start = jnp.repeat(prompt_lengths + state.lengths - 1, p)
  features, cache = fns.extend(state.cache,
                               state.block.reshape(batch * p, k), start)
  logits = fns.next_token_logits(features)  # [batch * p, k, vocab]
  scored = prompt_lib.argmax(logits).reshape(batch, p, k)
  choice, accepted = verify(
      criterion, state.block[:, :, 1:],
      logits.reshape(batch, p, k, -1)[:, :, :-1], min_block - 1,
      scored[:, :, :-1])
  rows = jnp.arange(batch) * p + choice
  block = ops.take_at(state.block, choice)
  scored = ops.take_at(scored, choice)
  tokens, lengths, done, count = _append(state, block, scored, accepted,
                                         k=k, max_len=max_len, eos_id=eos_id,
                                         pad_id=pad_id)
  # Every draft's rows continue from the winner's cache.
  cache = _take_rows(fns, cache, jnp.repeat(rows, p))
  token = ops.take_at(scored, accepted)
  proposals = fns.proposal_logits(ops.take_at(features[rows], accepted))
  next_block = refine_lib.propose(refinement, rescore, token, proposals,
                                  _history(refinement, tokens, lengths))
  return _advance(state, tokens, lengths, done, count, next_block, cache, k)
