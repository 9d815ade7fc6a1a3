"""What decoders take from a model, and what they return."""

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

Cache = Any  # Any pytree the model's `extend` reads and returns.


class DecodingFns(NamedTuple):
  """The model side of decoding, as pure functions (traced inside the loop).

  Attributes:
    extend: (cache, tokens [batch, n], start [batch]) ->
      (features [batch, n, ...], cache). Runs the model on n new positions
      per example, tokens[:, j] sitting at absolute position start + j, and
      records them in the cache. Positions at or past an example's accepted
      length may hold stale entries from rejected proposals: the model must
      let a query at position p attend to positions <= p only.
    next_token_logits: features [..., ...] -> [..., vocab]. The scoring model
      (head 1): the distribution of the token after each position.
    proposal_logits: (cache, features [batch, n, ...], next_tokens
      [batch, n], start [batch], last [batch]) -> (logits [batch, k - 1,
      vocab], cache). Heads 2..k after the last accepted position, all in
      one pass (no head reads another's proposal). features are the
      outputs of the n positions the last call scored (the prompt, or a
      block), from absolute position start; next_tokens[:, j] the token
      after position j (accepted tokens, then head 1's token after the
      last accepted position, index `last`; later entries are stale). The
      model may keep state of its own in the cache (a block drafter's
      context entries), under the same rule as `extend`: entries past the
      accepted length are stale and must stay unread. Unused at k = 1
      (greedy decoding).
    draft: for heads that read earlier heads' proposals, instead of
      `proposal_logits`: (cache, features, next_tokens, start, last,
      choose) -> (proposals [batch, k - 1], logits [batch, k - 1, vocab],
      cache), the arguments as `proposal_logits`'. The model makes the
      draft after position `last` head after head, calling choose(index,
      logits [batch, vocab]) -> [batch] for the token of draft position
      `index` (0-based: head index + 2) before the next head reads it; it
      may keep state of its own in the cache (a draft layer's keys and
      values) under the same rule. The logits are what each proposal was
      chosen from. None: the heads draft in one pass
      (`proposal_logits`).
    draft_tree: with `draft`: (cache, features, next_tokens, start,
      last, grow) -> cache. The model grows a tree of drafts after
      position `last` level by level (`tree_growth.py`), each node
      drafted once: at level 0 (the root, head 1's token) to k - 2 it
      calls grow(level, logits [batch, W, vocab]) with the logits of the
      children of each of the level's W nodes, and grow returns (tokens
      [batch, W'], parents [batch, W']), the next level's nodes and their
      parents' places among the W, which it drafts after next; it may keep
      state of its own in the cache under the same rule. None: `draft`
      alone (no tree of a dependent drafter).
    extend_tree: (cache, tokens [batch, N], start [batch], depths
      [batch, N], ancestors [batch, N, N]) -> (features [batch, N, ...],
      cache). Scores a token tree (`tree.py`): node 0 is the last accepted
      token at position start, node i sits at start + depths[:, i] and is
      written to cache position start + i; it attends to the positions
      before start and to the nodes j with ancestors[:, i, j] (its own
      path), so its features are those of its path decoded as a chain.
      Used for several drafts per call (a `tree.Tree`, or a refinement of
      p > 1 drafts); None: the model serves one draft a call.
    commit: (cache, start [batch], nodes [batch, m]) -> cache. After
      `extend_tree`: moves the entries of the winning path's nodes (at
      start + nodes[:, j]) to start + j, as a chain decode of that path
      would have written them; nothing else.
  """
  extend: Callable[[Cache, jax.Array, jax.Array], tuple[Any, Cache]]
  next_token_logits: Callable[[Any], jax.Array]
  proposal_logits: Callable[..., tuple[jax.Array, Cache]] | None = None
  draft: Callable[..., tuple[jax.Array, jax.Array, Cache]] | None = None
  draft_tree: Callable[..., Cache] | None = None
  extend_tree: Callable[..., tuple[Any, Cache]] | None = None
  commit: Callable[[Cache, jax.Array, jax.Array], Cache] | None = None


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DecodeResult:
  """Decoded tokens and per-example statistics.

  Counting convention: every model call is counted, the first one (the
  prompt pass, which yields the first token and the first proposals)
  included. A call "appends" the tokens it adds to an example's output.

  Attributes:
    tokens: [batch, max_len] generated tokens; pad_id after the end (-1
      where no vocabulary id pads). An example ends at its first end id,
      eos_id or a stop id (kept), or after max_len tokens.
    lengths: [batch] generated tokens, the end id included.
    model_calls: [batch] model calls made while the example was unfinished.
    block_sizes: [batch, k + 1] histogram: block_sizes[i, j] is the number
      of model calls that appended j tokens to example i (greedy decoding
      is k = 1).
      Sums to model_calls; sum_j j * block_sizes[i, j] == lengths[i].
  """
  tokens: jax.Array
  lengths: jax.Array
  model_calls: jax.Array
  block_sizes: jax.Array

  @property
  def mean_block_size(self) -> jax.Array:
    """Tokens per model call over the whole batch (1 for greedy)."""
    return self.lengths.sum() / jnp.maximum(self.model_calls.sum(), 1)

  @property
  def iterations(self) -> jax.Array:
    """Model calls of the batch: the loop runs until its slowest example ends."""
    return self.model_calls.max()
