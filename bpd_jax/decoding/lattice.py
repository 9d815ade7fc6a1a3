"""The best paths through a draft lattice (Kim et al. 2024, Section 5).

The proposal heads' top-t tokens at each of m positions form a lattice of
t^m drafts. A path's score adds, position by position, the head's log
probability of its token and, weighted, a language model's log probability
of the token given the c tokens before it. With an n-gram model (c = n - 1)
the score of position j depends only on the path's last c choices, so the
p best paths come from a k-best Viterbi recursion over states "the last
min(c, m) choices": t^min(c, m) states, p partial paths kept per state,
exact (tested against enumerating every path). Everything has fixed shapes:
it runs inside the decoding loop.
"""

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

# (context [..., c] token ids, oldest first; word [...]) -> [...] log prob.
ContextScore = Callable[[jax.Array, jax.Array], jax.Array]


def best_paths(tokens: jax.Array, head_scores: jax.Array, history: jax.Array,
               paths: int, score: ContextScore | None = None,
               weight: float = 0.0) -> tuple[jax.Array, jax.Array]:
  """The `paths` highest-scoring drafts of a lattice, best first.

  A path's score is sum_j (1 - weight) head_scores[j, choice_j]
  + weight score(context_j, token_j), context_j being the c tokens before
  position j (from `history` where the path is shorter than c).

  Args:
    tokens: [batch, m, t] the lattice: t candidate tokens per position.
    head_scores: [batch, m, t] their log probabilities under the heads.
    history: [batch, c] the tokens before the lattice, oldest first (c = 0
      without a language model).
    paths: p, 1 <= p <= t^m.
    score: the language model, or None (head scores alone).
    weight: its share of the score, in [0, 1].

  Returns:
    (drafts [batch, p, m] token ids, scores [batch, p]), best first.
  """
  batch, m, t = tokens.shape
  if not 1 <= paths <= t ** m:
    raise ValueError(f'{paths} drafts asked of a lattice of {t}^{m} = '
                     f'{t ** m} paths.')
  c = history.shape[1] if score is not None else 0
  s = min(c, m)  # Choices a state remembers.
  states = t ** s
  # digits[σ, i]: choice i of state σ (i = s - 1 the most recent).
  digits = np.array(np.unravel_index(np.arange(states), (t,) * s)).T \
      if s else np.zeros((1, 0), np.int64)

  if score is not None:
    # The language model's scores depend on the lattice, not on the search:
    # all of them in one batched call, [batch, m, S, t].
    context = jnp.stack([_contexts(tokens, history, digits, j, c, s)
                         for j in range(m)], axis=1)  # [batch, m, S, c]
    lm = weight * score(
        jnp.broadcast_to(context[:, :, :, None, :],
                         (batch, m, states, t, c)),
        jnp.broadcast_to(tokens[:, :, None, :], (batch, m, states, t)))

  # Partial paths: the initial state (no choice yet) holds one empty path.
  beams = jnp.full((batch, states, paths), -jnp.inf).at[:, 0, 0].set(0.0)
  choices = jnp.zeros((batch, states, paths, m), jnp.int32)
  for j in range(m):
    step = (1.0 - weight) * head_scores[:, j][:, None, :]  # [batch, 1, t]
    if score is not None:
      step = step + lm[:, j]  # [batch, S, t]
    step = jnp.broadcast_to(step, (batch, states, t))
    # State σ' = (σ[1:], choice): its predecessors differ in σ's oldest
    # choice d. Candidates [batch, S', d, p].
    new = np.arange(states)
    choice = new % t
    if s:
      previous = (np.arange(t)[None, :] * t ** (s - 1)
                  + (new // t)[:, None])  # [S', t]
    else:
      previous = np.zeros((1, 1), np.int64)
    if s:
      candidates = (beams[:, previous]  # [batch, S', d, p]
                    + step[:, previous, choice[:, None]][..., None])
    else:  # One state: the t choices compete, [batch, 1, t, p].
      candidates = beams[:, :1, None, :] + step[:, 0][:, None, :, None]
    flat = candidates.reshape(batch, states, -1)
    beams, pick = jax.lax.top_k(flat, paths)  # [batch, S', p]
    source = pick // paths  # d (or the choice, without states)
    beam = pick % paths
    if s:
      origin = jnp.asarray(previous)[new[None, :, None], source]
      chosen = jnp.broadcast_to(jnp.asarray(choice)[None, :, None],
                                source.shape)
    else:
      origin, chosen = jnp.zeros_like(source), source
    choices = choices[jnp.arange(batch)[:, None, None], origin, beam]
    choices = choices.at[..., j].set(chosen.astype(jnp.int32))
  scores, pick = jax.lax.top_k(beams.reshape(batch, -1), paths)
  best = choices.reshape(batch, -1, m)[jnp.arange(batch)[:, None], pick]
  drafts = jnp.take_along_axis(tokens, best.transpose(0, 2, 1), axis=2)
  return drafts.transpose(0, 2, 1), scores


def _contexts(tokens, history, digits, j, c, s) -> jax.Array:
  """[batch, S, c]: the c tokens before lattice position j for every state."""
  columns = []
  for i in range(c):
    q = j - c + i  # Lattice position of context slot i.
    if q < 0:
      columns.append(jnp.broadcast_to(history[:, c + q][:, None],
                                      (history.shape[0], digits.shape[0])))
    else:
      columns.append(tokens[:, q][:, digits[:, s - (j - q)]])
  return jnp.stack(columns, axis=-1)
