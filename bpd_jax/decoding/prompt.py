"""The steps every decoder shares: the prompt pass, the buffer layout and
the heads' drafts."""

import jax
import jax.numpy as jnp

from bpd_jax import ops
from bpd_jax.decoding.types import Cache, DecodingFns


def required_positions(prompt_length: int, max_len: int, k: int = 1) -> int:
  """Decoder positions a cache must hold.

  The prompt, max_len generated tokens, and the k - 1 positions a proposal
  block reaches past the last token (an example that has finished still
  takes part in the batch's calls, at its final offset).
  """
  return prompt_length + max_len + k - 1


def prefill(fns: DecodingFns, cache: Cache, prompt: jax.Array,
            prompt_lengths: jax.Array) -> tuple[jax.Array, Cache]:
  """Runs the prompt through the model: the first model call.

  Args:
    fns: the model's decoding functions.
    cache: an empty cache holding at least `required_positions` positions.
    prompt: [batch, prompt_length] tokens, right-padded.
    prompt_lengths: [batch] valid prompt tokens per example (>= 1).

  Returns:
    (features at each example's last prompt position [batch, ...], cache).
    Padding positions past a prompt are written to the cache too; they lie
    where the first generated tokens go and are overwritten before any query
    can attend to them.
  """
  features, cache = fns.extend(cache, prompt,
                               jnp.zeros_like(prompt_lengths))
  return ops.take_at(features, prompt_lengths - 1), cache


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


def argmax(logits: jax.Array) -> jax.Array:
  """Greedy token ids: [..., vocab] -> [...] int32."""
  return ops.argmax(logits)


def draft(fns: DecodingFns, features: jax.Array, token: jax.Array,
          choose) -> tuple[jax.Array, jax.Array]:
  """Heads 2..k's proposals after a position, and what they were chosen from.

  Args:
    fns: the model's decoding functions: `draft` where the heads read each
      other's proposals, else `proposal_logits`.
    features: [batch, ...] the features at the last accepted position.
    token: [batch] head 1's token there.
    choose: (index, logits [batch, n, vocab]) -> [batch, n] tokens of draft
      positions index .. index + n - 1 (argmax, or a draw). Independent
      heads choose all k - 1 at once (index 0); dependent heads one at a
      time.

  Returns:
    (proposals [batch, k - 1], logits [batch, k - 1, vocab]).
  """
  if fns.draft is not None:
    return fns.draft(features, token,
                     lambda index, logits: choose(index, logits[:, None])[:, 0])
  logits = fns.proposal_logits(features)
  return choose(0, logits), logits
