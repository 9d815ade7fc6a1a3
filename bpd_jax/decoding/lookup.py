"""Drafts that need no training: prompt lookup and an n-gram model.

Any model decodes blockwise with these, its heads trained or not (an
imported checkpoint's fresh heads, or none worth reading):

- 'lookup' (prompt lookup, as Hugging Face's `prompt_lookup_num_tokens`
  and vLLM's n-gram proposer): per example, find the latest earlier
  occurrence of the last n tokens of the prompt and output so far, n from
  `max_ngram` down to `min_ngram` (the longest match wins), and propose
  the up to k - 1 tokens that followed it. An encoder-decoder's source
  is searched too, before its output (`generate` passes it as the text
  searched). Code being edited or continued, and summaries quoting their
  source, repeat their context; translation copies names and numbers.
- 'ngram': the greedy continuation under an n-gram language model
  (`rescorers.ngram.NgramModel`, built from a training corpus), where
  its longest context found is at least `min_ngram` - 1 tokens (an
  n-gram of `min_ngram` tokens with the proposal).

Either alone (`heads='none'`), or beside the model's trained drafter:
'fallback' takes the lookup's draft where it has one and the heads'
elsewhere; 'tree' verifies both drafts in one call as two branches of a
token tree (`tree.from_drafts`).

A position with nothing to propose holds NO_PROPOSAL (-1): never
accepted, and (sampling) never a rejection; a call whose examples have
nothing to propose scores the last token alone, as a greedy call does
(`blockwise.py`). Proposals are fixed points of the history, point
masses to the rejection rule of sampling: accepted with probability
p(x), so sampling keeps the base model's distribution.

The search runs inside the compiled loop as array operations over the
token buffer: O(batch x length x max_ngram) compares a call, no host
round trip.
"""

import dataclasses
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from bpd_jax.decoding import specs
from bpd_jax.decoding import tree as tree_lib
from bpd_jax.infra import numeric

SOURCES = ('lookup', 'ngram')
HEADS = ('none', 'fallback', 'tree')
# A proposal slot with nothing in it.
NO_PROPOSAL = -1
# A spec's options: key -> (field, type).
_SPEC_KEYS = {'max': ('max_ngram', int), 'min': ('min_ngram', int),
              'heads': ('heads', str)}



class NgramDrafter(NamedTuple):
  """The n-gram model's side of an 'ngram' draft, inside the decode.

  Attributes:
    next_token: context [batch, context] (oldest first) -> (the model's
      most probable next token [batch], the length of the longest suffix
      of the context it has seen [batch]).
    context: the model's context length, order - 1 (static).
    start_id: the token before an output's first (bos), read where the
      history is shorter than the context.
  """
  next_token: Callable[[jax.Array], tuple[jax.Array, jax.Array]]
  context: int
  start_id: int


@dataclasses.dataclass(frozen=True)
class Lookup:
  """A drafter that needs no training (static: part of a compilation key).

  Attributes:
    source: 'lookup' (the prompt and output so far) or 'ngram' (an n-gram
      model's greedy continuation).
    max_ngram: 'lookup': the longest n matched (>= min_ngram).
    min_ngram: the shortest match proposed from: 'lookup', the last n
      tokens found earlier; 'ngram', the model's context found plus the
      proposal (1: always propose). Longer is surer and proposes less.
    heads: the model's drafter beside it: 'none' (lookup alone; k is not
      bounded by the model's heads), 'fallback' (the heads' draft where
      the lookup has none) or 'tree' (both drafts, one tree).
  """
  source: str = 'lookup'
  max_ngram: int = 3
  min_ngram: int = 2
  heads: str = 'none'

  @classmethod
  def from_spec(cls, spec: str) -> 'Lookup':
    """From a flag's or config's string: 'lookup' or 'ngram', then
    options after a colon, e.g. 'lookup:max=4,min=2,heads=tree'."""
    if not isinstance(spec, str):
      raise ValueError(f'drafter {spec!r} is not a spec string like '
                       f"'lookup:max=4,min=2,heads=tree'.")
    source, _, rest = spec.partition(':')
    if source not in SOURCES:
      raise ValueError(f'drafter {spec!r}: a drafter needing no training is '
                       f'one of {SOURCES}, then options after a colon '
                       f"(e.g. 'lookup:max=4,min=2,heads=tree').")
    lookup = cls(source=source,
                 **specs.fields(spec, rest, _SPEC_KEYS, 'drafter'))
    lookup.check()
    return lookup

  @property
  def spec(self) -> str:
    """The string `from_spec` reads back (defaults left out)."""
    options = [f'{key}={getattr(self, name)}'
               for key, (name, _) in _SPEC_KEYS.items()
               if getattr(self, name) != getattr(Lookup, name)]
    return self.source + (':' + ','.join(options) if options else '')

  def check(self) -> None:
    """Raises ValueError naming a field out of its range."""
    if self.source not in SOURCES:
      raise ValueError(f'lookup source={self.source!r} is not one of '
                       f'{SOURCES}.')
    if self.heads not in HEADS:
      raise ValueError(f'lookup heads={self.heads!r} is not one of {HEADS}.')
    if not (numeric.is_integer(self.min_ngram) and self.min_ngram >= 1):
      raise ValueError(f'lookup min={self.min_ngram!r} must be an integer '
                       f'>= 1.')
    if not (numeric.is_integer(self.max_ngram)
            and self.min_ngram <= self.max_ngram <= MAX_NGRAM):
      raise ValueError(f'lookup max={self.max_ngram!r} must be an integer '
                       f'in [min={self.min_ngram}, {MAX_NGRAM}].')

  def check_order(self, order: int) -> None:
    """Raises ValueError where an 'ngram' drafter's min asks for contexts
    longer than a model of `order` holds (order - 1 tokens): nothing would
    ever be proposed, every call scoring one position."""
    if self.source == 'ngram' and self.min_ngram > order:
      raise ValueError(f'drafter {self.spec!r}: min={self.min_ngram} asks '
                       f'for contexts of {self.min_ngram - 1} tokens, but '
                       f'the n-gram model of order {order} finds '
                       f'{order - 1} at most: min <= {order}.')


# The longest n matched: each n is one pass of compares over the buffer.
MAX_NGRAM = 16


def parse(drafter) -> Lookup | None:
  """A `drafter` argument as DecodeOptions.lookup: None for the model's
  own ('heads', '' or None), a Lookup as it is, else a spec string
  (`Lookup.from_spec`)."""
  if drafter in (None, '', 'heads'):
    return None
  if isinstance(drafter, Lookup):
    return drafter
  if not isinstance(drafter, str):
    raise ValueError(f'drafter={drafter!r} is not a drafter: \'heads\' (the '
                     f"model's), a spec such as 'lookup' or 'ngram', or a "
                     f'decoding.Lookup.')
  return Lookup.from_spec(drafter)


def history(prompt: jax.Array, prompt_lengths: jax.Array, tokens: jax.Array,
            lengths: jax.Array) -> jax.Array:
  """[batch, P + T]: each example's prompt then its output, contiguous
  (the prompt is right-padded, so the output starts at its own offset);
  past prompt_lengths + lengths: NO_PROPOSAL.

  Args:
    prompt: [batch, P]; prompt_lengths: [batch].
    tokens: [batch, T] the output so far; lengths: [batch].
  """
  width = prompt.shape[1] + tokens.shape[1]
  position = jnp.arange(width)[None, :]
  in_output = jnp.clip(position - prompt_lengths[:, None], 0,
                       tokens.shape[1] - 1)
  in_prompt = jnp.broadcast_to(
      jnp.minimum(position, prompt.shape[1] - 1), in_output.shape)
  joined = jnp.where(position < prompt_lengths[:, None],
                     jnp.take_along_axis(prompt, in_prompt, axis=1),
                     jnp.take_along_axis(tokens, in_output, axis=1))
  return jnp.where(position < (prompt_lengths + lengths)[:, None], joined,
                   NO_PROPOSAL).astype(jnp.int32)


def match_draft(history_tokens: jax.Array, lengths: jax.Array, m: int,
                max_ngram: int, min_ngram: int
                ) -> tuple[jax.Array, jax.Array]:
  """Prompt lookup: the tokens after the latest earlier occurrence of each
  example's last n tokens, the longest n in [min_ngram, max_ngram] found.

  Args:
    history_tokens: [batch, L] prompt and output (`history`).
    lengths: [batch] valid tokens of each row, >= 1.
    m: proposals wanted (k - 1).
    max_ngram, min_ngram: the n searched; the longest found wins.

  Returns:
    (proposals [batch, m]: what followed the match, repeated if fewer
    than m tokens followed it (the history taken to loop); NO_PROPOSAL
    where nothing matched; n [batch], the matched length, 0: none).
  """
  batch, width = history_tokens.shape
  start = jnp.arange(width)[None, :]  # Where an occurrence starts.
  best_n = jnp.zeros((batch,), jnp.int32)
  best_at = jnp.zeros((batch,), jnp.int32)
  padded = jnp.concatenate(
      [history_tokens, jnp.full((batch, max_ngram), NO_PROPOSAL,
                                history_tokens.dtype)], axis=1)
  # The last max_ngram tokens, one gather: tail[:, -n:] is the n-gram.
  tail = jnp.take_along_axis(history_tokens, jnp.clip(
      lengths[:, None] - max_ngram + jnp.arange(max_ngram), 0, width - 1),
                             axis=1)
  for n in range(min_ngram, max_ngram + 1):  # Longer wins: later overrides.
    suffix_start = lengths - n
    same = jnp.ones((batch, width), bool)
    for i in range(n):
      wanted = tail[:, max_ngram - n + i, None]
      same = same & (padded[:, i:i + width] == wanted)
    # An earlier occurrence, followed by at least one token.
    same = same & (start + n < lengths[:, None]) & (suffix_start[:, None]
                                                    >= 0)
    found = same.any(axis=1)
    latest = width - 1 - jnp.argmax(same[:, ::-1], axis=1)
    best_n = jnp.where(found, n, best_n)
    best_at = jnp.where(found, latest + n, best_at)
  # What followed runs up to the end of the history, d tokens; past it the
  # history is taken to go on repeating with period d (the match is then
  # the suffix d tokens back: output that loops, proposed whole).
  period = jnp.maximum(lengths - best_at, 1)[:, None]
  index = best_at[:, None] + jnp.arange(m)[None, :] % period
  follow = jnp.take_along_axis(padded, jnp.minimum(index, width - 1), axis=1)
  return jnp.where(best_n[:, None] > 0, follow,
                   NO_PROPOSAL).astype(jnp.int32), best_n


def draft(lookup: Lookup, prompt: jax.Array, prompt_lengths: jax.Array,
          tokens: jax.Array, lengths: jax.Array, m: int,
          ngram: NgramDrafter | None = None) -> jax.Array:
  """[batch, m] the lookup's proposals after each example's prompt and
  output so far (`history`'s arguments), NO_PROPOSAL where it has none
  (`match_draft`, `ngram_draft`); `ngram` the model of an 'ngram'
  source."""
  history_tokens = history(prompt, prompt_lengths, tokens, lengths)
  lengths = prompt_lengths + lengths
  if lookup.source == 'ngram':
    if ngram is None:
      raise ValueError("drafter 'ngram' needs an n-gram model "
                       '(rescorers.ngram.NgramModel).')
    return ngram_draft(ngram, history_tokens, lengths, m,
                       lookup.min_ngram)[0]
  return match_draft(history_tokens, lengths, m, lookup.max_ngram,
                     lookup.min_ngram)[0]


def ngram_draft(ngram: NgramDrafter, history_tokens: jax.Array,
                lengths: jax.Array, m: int, min_ngram: int
                ) -> tuple[jax.Array, jax.Array]:
  """The n-gram model's greedy continuation of each example's history, m
  tokens, each proposed where the context the model found for it is at
  least min_ngram - 1 tokens long (and every proposal before it was).

  Args:
    ngram: the model's `NgramDrafter`.
    history_tokens, lengths: as `match_draft`'s.
    m: proposals wanted (k - 1).
    min_ngram: as `Lookup.min_ngram`.

  Returns:
    (proposals [batch, m], NO_PROPOSAL past the last one proposed; the
    first proposal's context length found [batch]).
  """
  context = ngram.context
  padded = jnp.concatenate(
      [jnp.full((history_tokens.shape[0], context), ngram.start_id,
                history_tokens.dtype), history_tokens], axis=1)
  window = jax.vmap(lambda row, end: jax.lax.dynamic_slice(
      row, (end,), (context,)))(padded, lengths)  # [batch, context]
  proposals, live, first_found = [], None, None
  for _ in range(m):
    token, found = ngram.next_token(window)
    ok = found >= min_ngram - 1
    live = ok if live is None else live & ok
    first_found = found if first_found is None else first_found
    proposals.append(jnp.where(live, token, NO_PROPOSAL))
    window = jnp.concatenate([window[:, 1:], token[:, None]], axis=1)
  return jnp.stack(proposals, axis=1).astype(jnp.int32), first_found


def filled(proposals: jax.Array, fallback: jax.Array) -> jax.Array:
  """[batch, m] the lookup's proposals, the fallback's [batch, m] in the
  slots it left empty."""
  return jnp.where(proposals == NO_PROPOSAL, fallback, proposals)


def beside_heads(token: jax.Array, heads: jax.Array,
                 found: jax.Array) -> tree_lib.TreeBlock:
  """heads='tree': the heads' draft and the lookup's after `token`
  [batch], one tree of 1 + 2m nodes (`tree.from_drafts`). The heads'
  chain comes first, so its m proposals are nodes 1..m; an empty lookup
  draft (filled with the heads', `filled`) merges into it.

  Args:
    token: [batch] the root, the last accepted token.
    heads, found: [batch, m] the heads' proposals and the lookup's.
  """
  m = heads.shape[1]
  root = token[:, None]
  drafts = jnp.stack([jnp.concatenate([root, heads], axis=1),
                      jnp.concatenate([root, found], axis=1)], axis=1)
  return tree_lib.from_drafts(drafts, (m, m), 1 + 2 * m)


def proposed(block: jax.Array) -> jax.Array:
  """[batch, m] bool: the slots of block [batch, m] holding a proposal."""
  return block != NO_PROPOSAL


def model_tokens(block: jax.Array) -> jax.Array:
  """block with its empty slots replaced by token 0, for the model to read
  (what an empty slot's position computes is never accepted)."""
  return jnp.maximum(block, 0)
