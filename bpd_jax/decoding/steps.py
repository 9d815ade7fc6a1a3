"""The steps every decoding loop shares (`blockwise.py`, `sampling.py`):
the prompt pass, the loop runner, end ids, the tokens after each scored
position, and the drafter's proposals."""

import jax
import jax.numpy as jnp

from bpd_jax.decoding import lookup as lookup_lib
from bpd_jax.decoding.types import Cache, DecodingFns


def prefill(fns: DecodingFns, cache: Cache,
            prompt: jax.Array) -> tuple[jax.Array, Cache]:
  """Runs the prompt through the model: the first model call.

  Args:
    fns: the model's decoding functions.
    cache: an empty cache holding at least
      `options.required_positions` positions.
    prompt: [batch, P] tokens, right-padded.

  Returns:
    (features of every prompt position [batch, P, ...], cache). Padding
    positions past a prompt are written to the cache too; they lie where
    the first generated tokens go and are overwritten before any query can
    attend to them.
  """
  return fns.extend(cache, prompt, jnp.zeros((prompt.shape[0],), jnp.int32))


def prompt_next_tokens(prompt: jax.Array, prompt_lengths: jax.Array,
                       first: jax.Array) -> jax.Array:
  """[batch, P]: the token after each prompt position, `first` (the first
  generated token) after the last one (the drafter's next_tokens for the
  prompt pass)."""
  after = jnp.roll(prompt, -1, axis=1)
  last = jnp.arange(prompt.shape[1]) == (prompt_lengths - 1)[:, None]
  return jnp.where(last, first[:, None], after)


def block_next_tokens(block: jax.Array, accepted: jax.Array,
                      token: jax.Array) -> jax.Array:
  """[batch, k]: the token after each block position: the accepted
  proposals, then `token` [batch] (head 1's, after the last accepted
  position); stale past it."""
  position = jnp.arange(block.shape[1])
  return jnp.where(position < accepted[:, None], jnp.roll(block, -1, axis=1),
                   token[:, None])


def run_loop(step, state, iterations: jax.Array | int | None = None):
  """Runs the decoding loop: `step` until every example is done.

  Args:
    step: state -> state, one model call and its bookkeeping.
    state: the loop state; its `done` [batch] says which examples ended.
    iterations: run exactly this many steps instead, finished or not (for
      timing one iteration of the real loop, `timing.loop_iteration_seconds`:
      finished examples cost as much as unfinished ones, shapes are fixed);
      None or a negative count: until done. A traced count: one compiled
      loop serves decoding and its timing at any count.
  """
  limit = jnp.asarray(-1 if iterations is None else iterations, jnp.int32)

  def running(carry):
    count, state = carry
    return jnp.where(limit < 0, ~jnp.all(state.done), count < limit)

  def body(carry):
    count, state = carry
    return count + 1, step(state)

  return jax.lax.while_loop(running, body, (jnp.int32(0), state))[1]


def ends(tokens: jax.Array, end_ids: tuple[int, ...]) -> jax.Array:
  """[...] bool: which tokens end a sequence, one of the static `end_ids`
  (eos_id, then the model's further stop ids)."""
  if len(end_ids) == 1:
    return tokens == end_ids[0]
  return jnp.isin(tokens, jnp.asarray(end_ids, tokens.dtype))


def proposals(fns: DecodingFns, cache: Cache, features: jax.Array,
          next_tokens: jax.Array, start: jax.Array, last: jax.Array,
          choose) -> tuple[jax.Array, jax.Array, Cache]:
  """Heads 2..k's proposals after a position, and what they were chosen from.

  Args:
    fns: the model's decoding functions: `draft` where the heads read each
      other's proposals, else `proposal_logits`.
    cache: the model's cache (a drafter may keep entries of its own
      there).
    features: [batch, n, ...] the outputs of the positions the last call
      scored, from absolute position `start` [batch].
    next_tokens: [batch, n] the token after each (`prompt_next_tokens`,
      `block_next_tokens`).
    last: [batch] index of the last accepted position: the draft follows
      head 1's token after it (next_tokens at `last`).
    choose: (index, logits [batch, m, vocab]) -> [batch, m] tokens of draft
      positions index .. index + m - 1 (argmax, or a draw). One-pass
      drafters choose all k - 1 at once (index 0); dependent heads one at
      a time.

  Returns:
    (proposals [batch, k - 1], logits [batch, k - 1, vocab], cache).
  """
  if fns.draft is not None:
    return fns.draft(
        cache, features, next_tokens, start, last,
        lambda index, logits: choose(index, logits[:, None])[:, 0])
  logits, cache = fns.proposal_logits(cache, features, next_tokens, start,
                                      last)
  return choose(0, logits), logits, cache


def scored_logits(fns: DecodingFns, cache: Cache, block: jax.Array,
                  start: jax.Array, live: jax.Array
                  ) -> tuple[jax.Array, Cache]:
  """The scoring model's logits at a draft's positions, [batch, k, vocab],
  for a draft whose slots may be empty (`lookup.NO_PROPOSAL`).

  A call in which no live example has a proposal scores the last accepted
  token alone, as a greedy call does (its logits stand at every position:
  nothing after position 0 is proposed, so nothing reads them); else the
  whole block, an empty slot read as token 0 (never accepted). The cache
  entries past the scored positions are stale either way, and unread.

  Args:
    fns, cache: the model's decoding functions and cache.
    block: [batch, k] the last accepted token, then the proposals.
    start: [batch] the block's first position.
    live: [batch] bool, the examples still decoding.
  """
  def whole(cache):
    features, cache = fns.extend(cache, lookup_lib.model_tokens(block),
                                 start)
    return fns.next_token_logits(features), cache

  def first_only(cache):
    features, cache = fns.extend(cache, block[:, :1], start)
    logits = fns.next_token_logits(features)
    return jnp.broadcast_to(logits, (logits.shape[0], block.shape[1],
                                     logits.shape[2])), cache

  any_proposal = (lookup_lib.proposed(block[:, 1]) & live).any()
  shape = jax.eval_shape(whole, cache)[0]
  logits = jnp.zeros(shape.shape, shape.dtype)
  logits, cache = _if(any_proposal, whole, logits, cache)
  return _if(~any_proposal, first_only, logits, cache)


def _if(flag: jax.Array, call, logits: jax.Array, cache: Cache):
  """(logits, cache) = call(cache) where `flag`, else as given: a while
  loop run at most once, not a `lax.cond`, whose operands XLA copies (the
  whole cache, every call: 15% of a Multi30k greedy call on a CPU)
  where a loop's carry is updated in place."""
  def body(carry):
    _, _, cache = carry
    logits, cache = call(cache)
    return jnp.zeros((), bool), logits, cache

  _, logits, cache = jax.lax.while_loop(lambda carry: carry[0], body,
                                        (flag, logits, cache))
  return logits, cache
