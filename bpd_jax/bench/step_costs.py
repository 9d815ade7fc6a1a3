"""Step costs: the seconds of one decoder model call, measured alone.

Blockwise decoding can only be as fast as its calls allow: with a mean
accepted block b, its speedup over greedy decoding is at most
b x T(1) / T(k), where T(1) is greedy's call (one new position per example,
head 1's logits and their argmax) and T(k) blockwise's (k new positions,
head 1 at all of them, heads 2..k at one position per example, and the
argmaxes). On an accelerator at batch 1 the two are close; on a CPU T(k)
grows with k. Both are measured here with the same shapes a decode uses
(batch, source length, cache size), so that the benchmark can report how
close a decode comes to that bound and `auto_k` can pick the k that pays.

A call is timed inside a jitted `lax.fori_loop` of n chained calls (each
call's input is the previous call's argmax, so XLA cannot hoist or drop
any), and T is the slope between two loop lengths (`bpd_jax.timing`): the
fixed cost of a jitted call cancels out, as inside the decoders' own loop.
The decoders' loop iterations, bookkeeping included, are timed the same way
by `timing.loop_iteration_seconds`.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from bpd_jax import timing
from bpd_jax.decoding import options as options_lib
from bpd_jax.infra import ops
from bpd_jax.models import drafters

@functools.partial(jax.jit, static_argnames=('k', 'positions', 'draft'))
def _chained_calls(model, source, k: int, positions: int, calls,
                   draft_ids=None, draft: bool = True):
  """Runs `calls` chained model calls of block size k; returns the last block.

  `calls` is traced, so one compilation serves both loop lengths;
  `draft_ids` the drafting vocabulary (`generate.Decoder`; None: all);
  `draft` False: the verification alone (the base over k positions and
  head 1 at all of them), the floor of any drafter's call.
  """
  batch = source.shape[0]
  source = source if model.config.is_encoder_decoder else None
  cache = model.init_cache(batch, positions, source)
  weights = model.decoding_weights(k, draft_ids)
  # Mid-buffer, as in the middle of a decode; every call attends to the
  # whole (masked) cache either way, so the offset does not change the cost.
  start = jnp.full((batch,), (positions - k) // 2, jnp.int32)

  def call(_, state):
    block, cache = state
    features, cache = model.extend(cache, block, start)
    scored = ops.argmax(model.next_token_logits(features, weights))
    if k == 1 or not draft:
      return scored, cache
    # The draft's work (a drafter's cache writes too) is part of a call's
    # cost; drafted after the block's first position, as after a
    # rejection.
    first = jnp.zeros((batch,), jnp.int32)
    if drafters.dependent(model.config.head_layer):
      proposals, _, cache = model.draft(
          cache, features, scored, start, first,
          lambda index, logits: ops.argmax(logits), k, weights)
    else:
      logits, cache = model.proposal_logits(cache, features, scored, start,
                                            first, k, weights)
      proposals = ops.argmax(logits)
    return jnp.concatenate([scored[:, :1], proposals], axis=1), cache

  block = jnp.full((batch, k), model.config.bos_id, jnp.int32)
  return jax.lax.fori_loop(0, calls, call, (block, cache))[0]


def measure(model, *, batch_size: int, source_len: int, max_len: int,
            k: int, repeats: int = 5, draft_ids=None,
            draft: bool = True) -> float:
  """Seconds of one model call of block size k (k = 1: greedy's call).

  Args:
    model: the Transformer.
    batch_size: examples per call.
    source_len: source length (encoder-decoder) or prompt length.
    max_len: tokens a decode generates at most (sets the cache size).
    k: block size, 1 <= k <= model.config.num_proposal_heads.
    repeats: timings of each loop length; the fastest is kept (the others
      are the machine's noise).
    draft_ids: the ids proposals are chosen from (`generate.Decoder`'s
      draft_vocab; None: all).
    draft: False: the call without its draft (the verification alone).

  Returns:
    Seconds per call.
  """
  if not 1 <= k <= model.config.num_proposal_heads:
    raise ValueError(f'k={k} must be in [1, '
                     f'{model.config.num_proposal_heads}].')
  positions = options_lib.required_positions(
      1 if model.config.is_encoder_decoder else source_len, max_len, k)
  source = np.full((batch_size, source_len), model.config.eos_id, np.int32)
  return timing.per_iteration_seconds(
      lambda calls: jax.block_until_ready(
          _chained_calls(model, source, k, positions, np.int32(calls),
                         draft_ids, draft)),
      repeats)


def measure_all(model, ks, draft_ids=None, draft: bool = True,
                **shape) -> dict[int, float]:
  """{k: seconds per call} for each k (1: greedy's call) at one shape,
  drafting among `draft_ids` (None: all); `draft` False: the
  verification alone."""
  return {k: measure(model, k=k, draft_ids=draft_ids, draft=draft, **shape)
          for k in ks}
