"""Cached, batched greedy decoding in one `lax.while_loop`.

The baseline of blockwise decoding, and the output exact blockwise decoding
must reproduce token for token. One model call per generated token.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp

from bpd_jax.decoding import prompt as prompt_lib
from bpd_jax.decoding.types import Cache, DecodeResult, DecodingFns
from bpd_jax.infra import ops


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class GreedyState:
  """Loop state.

  Attributes:
    tokens: [batch, max_len + 1] generated tokens, pad_id past each length
      (one spare column: finished examples keep writing pad at their end).
    lengths: [batch] tokens generated so far.
    done: [batch] bool, the example has produced eos_id or max_len tokens.
    cache: the model's cache.
  """
  tokens: jax.Array
  lengths: jax.Array
  done: jax.Array
  cache: Cache


def greedy_decode(fns: DecodingFns, cache: Cache, prompt: jax.Array,
                  prompt_lengths: jax.Array, *, max_len: int, eos_id: int,
                  pad_id: int,
                  iterations: jax.Array | None = None) -> DecodeResult:
  """Greedy decoding of a batch, each example ending at its own eos_id.

  Args:
    fns: the model's decoding functions (`proposal_logits` unused).
    cache: an empty cache of `prompt.required_positions(P, max_len)`.
    prompt: [batch, P] right-padded decoder prompts (bos_id alone for an
      encoder-decoder).
    prompt_lengths: [batch] valid prompt tokens per example, >= 1.
    max_len: most tokens to generate per example, >= 1.
    eos_id: end-of-sequence id (kept in the output).
    pad_id: filler past each example's end.
    iterations: exactly this many loop iterations (timing; see
      `prompt.run_loop`); None: until every example has ended.

  Returns:
    DecodeResult with block_sizes of shape [batch, 2].
  """
  batch = prompt.shape[0]
  last, cache = prompt_lib.prefill(fns, cache, prompt, prompt_lengths)
  first = prompt_lib.argmax(fns.next_token_logits(last))
  state = GreedyState(
      tokens=jnp.full((batch, max_len + 1), pad_id, jnp.int32)
      .at[:, 0].set(first),
      lengths=jnp.ones((batch,), jnp.int32),
      done=(first == eos_id) | (max_len == 1),
      cache=cache)

  state = prompt_lib.run_loop(
      functools.partial(_greedy_step, fns, prompt_lengths, max_len=max_len,
                        eos_id=eos_id, pad_id=pad_id),
      state, iterations)
  calls = state.lengths  # One token per call.
  return DecodeResult(
      tokens=state.tokens[:, :max_len],
      lengths=state.lengths,
      model_calls=calls,
      block_sizes=jnp.stack([jnp.zeros_like(calls), calls], axis=1))


def _greedy_step(fns, prompt_lengths, state: GreedyState, *, max_len, eos_id,
                 pad_id) -> GreedyState:
  """Feeds every example's last token and appends the argmax."""
  last_token = ops.take_at(state.tokens, state.lengths - 1)
  features, cache = fns.extend(state.cache, last_token[:, None],
                               prompt_lengths + state.lengths - 1)
  token = prompt_lib.argmax(fns.next_token_logits(features[:, 0]))
  live = ~state.done
  tokens = ops.write_at(state.tokens,
                        jnp.where(live, token, pad_id)[:, None],
                        state.lengths)
  lengths = state.lengths + live
  done = state.done | (token == eos_id) | (lengths >= max_len)
  return GreedyState(tokens, lengths, done, cache)
