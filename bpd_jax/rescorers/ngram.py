"""An interpolated Kneser-Ney n-gram model, built here, looked up on device.

Kim et al. (2024) rescore the heads' draft lattice with an n-gram language
model inside the decoding loop, so the model must live on the device and be
read with fixed shapes. A dense table is out of the question for a 32k
vocabulary (a bigram table alone would be 4 GB), so the model is kept as
sorted arrays of what the corpus contains, searched by binary search:

- a context trie, keyed (parent context node, word) with the words taken
  most recent first, so every suffix of a context (the back-off chain) lies
  on one path from the root: walking it costs n - 1 searches;
- the probabilities of the seen n-grams, keyed (context node, word);
- the unigram distribution, dense ([vocab]: the one dense table).

The smoothing is interpolated Kneser-Ney (Chen and Goodman 1998, one
discount per order): for a context h of length n - 1 with counts a(h, w)
(raw counts at the highest order, continuation counts below it, raw counts
again for n-grams that begin with the sentence-start padding),

  P(w | h) = max(a(h, w) - D_n, 0) / a(h) + gamma(h) P(w | h'),
  gamma(h) = D_n N1+(h .) / a(h),

h' being h without its oldest word, and the unigram level interpolating with
the uniform distribution over the vocabulary, so P(. | h) sums to 1 over the
vocabulary for every context, seen or not. A seen (h, w) stores P(w | h);
an unseen one is gamma(h) P(w | h') (gamma = 1 for an unseen context), the
back-off form of the same interpolated model, so lookups are exact.
"""

import collections
import dataclasses
import functools
import math
import zipfile
from typing import Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from bpd_jax.infra import atomic_files
from bpd_jax.infra import errors


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class NgramModel:
  """The model as device arrays (a pytree: pass it into jitted functions).

  Attributes:
    order: n, the longest n-gram (static).
    context_parent: [C] int32, context node i + 1 extends node
      context_parent[i] (0 is the empty context) by one older word.
    context_word: [C] int32, that word. (parent, word) pairs are sorted.
    context_log_backoff: [C + 1] float32, log gamma of each context node.
    entry_context: [E] int32, the context node of a seen n-gram (order >= 2).
    entry_word: [E] int32, its last word. (context, word) pairs are sorted.
    entry_log_prob: [E] float32, log P(word | context).
    unigram_log_prob: [vocab] float32, log P(word).
    context_best_word: [C + 1] int32, the most probable next word after
      each context node (`greedy_table`): the model's greedy
      continuation, what the 'ngram' drafter proposes.
    context_best_log_prob: [C + 1] float32, its log probability.
  """
  order: int = dataclasses.field(metadata=dict(static=True))
  context_parent: jax.Array
  context_word: jax.Array
  context_log_backoff: jax.Array
  entry_context: jax.Array
  entry_word: jax.Array
  entry_log_prob: jax.Array
  unigram_log_prob: jax.Array
  context_best_word: jax.Array
  context_best_log_prob: jax.Array

  @property
  def vocab_size(self) -> int:
    return self.unigram_log_prob.shape[0]

  def save(self, path: str):
    """Writes the arrays to `path` (.npz), atomically."""
    arrays = {f.name: np.asarray(getattr(self, f.name))
              for f in dataclasses.fields(self) if f.name != 'order'}
    with atomic_files.replacing(path) as temp:
      np.savez(temp, order=self.order, **arrays)

  @classmethod
  def load(cls, path: str, vocab_size: int | None = None,
           named: str = '') -> 'NgramModel':
    """The model `save` wrote (a file written before the greedy table
    existed gets it computed).

    Args:
      path: the file.
      vocab_size: the decoding model's vocabulary size, which the n-gram
        model's must be (None: not checked).
      named: how the caller names the path in an error (e.g. '--ngram').

    Raises:
      errors.DataError: naming `path`, where it is not such a file, or its
        arrays disagree in shape, hold ids outside its vocabulary or NaN,
        or its vocabulary is not `vocab_size` ids.
    """
    order, arrays = read_arrays(path)
    if vocab_size is not None and len(arrays['unigram_log_prob']) != (
        vocab_size):
      raise errors.DataError(
          f'{named or "the n-gram model"}={path}: an n-gram model of a '
          f'vocabulary of {len(arrays["unigram_log_prob"])} ids, the model '
          f'decodes {vocab_size}: build it with the run\'s vocabulary (the '
          f'drafts job on this run).')
    if 'context_best_word' not in arrays:
      arrays.update(zip(('context_best_word', 'context_best_log_prob'),
                        greedy_table(**arrays)))
    return cls(order=order, **{
        f.name: jnp.asarray(arrays[f.name])
        for f in dataclasses.fields(cls) if f.name != 'order'})

  def nbytes(self) -> int:
    return sum(int(np.asarray(x).nbytes) for x in jax.tree.leaves(self))


def read_arrays(path: str) -> tuple[int, dict[str, np.ndarray]]:
  """(order, arrays) of a file `NgramModel.save` wrote, checked on the host
  (no device array is made: the jobs check it with their config).

  Raises:
    errors.DataError: naming `path`: not such a file, an array missing or
      of another shape, an id outside the vocabulary or past the context
      nodes, a NaN or +inf log probability.
  """
  def refuse(why):
    return errors.DataError(f'{path} is not an n-gram model NgramModel.save '
                            f'wrote: {why}.')
  try:
    data = np.load(path)
  except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
    raise refuse(f'{type(error).__name__}: {error}'.split('\n')[0]) from None
  if not isinstance(data, np.lib.npyio.NpzFile):  # A .npy: one array.
    raise refuse('it holds one array, not named ones')
  try:
    with data:
      arrays = {name: data[name] for name in data.files}
  except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
    raise refuse(f'{type(error).__name__}: {error}'.split('\n')[0]) from None
  names = [f.name for f in dataclasses.fields(NgramModel)]
  optional = {'context_best_word', 'context_best_log_prob'}
  missing = [n for n in names if n not in arrays and n not in optional]
  if missing:
    raise refuse(f'it lacks the arrays {missing}')
  order = arrays.pop('order')
  if order.shape or not np.issubdtype(order.dtype, np.integer) or order < 1:
    raise refuse(f'order={order!r} is not an integer >= 1')
  if any(a.ndim != 1 for a in arrays.values()):
    raise refuse('its arrays are not all 1-D')
  contexts = len(arrays['context_parent'])
  vocab = len(arrays['unigram_log_prob'])
  lengths = dict(context_word=contexts, context_log_backoff=contexts + 1,
                 entry_word=len(arrays['entry_context']),
                 entry_log_prob=len(arrays['entry_context']),
                 context_best_word=contexts + 1,
                 context_best_log_prob=contexts + 1)
  for name, length in lengths.items():
    if name in arrays and len(arrays[name]) != length:
      raise refuse(f'{name} has {len(arrays[name])} entries, not {length}')
  limits = dict(context_parent=contexts + 1, entry_context=contexts + 1,
                context_word=vocab, entry_word=vocab, context_best_word=vocab)
  for name, limit in limits.items():
    ids = arrays.get(name)
    if ids is None or not ids.size:
      continue
    if not np.issubdtype(ids.dtype, np.integer) or not (
        0 <= ids.min() and ids.max() < limit):
      raise refuse(f'{name} holds values outside [0, {limit})')
  for name in ('context_log_backoff', 'entry_log_prob', 'unigram_log_prob',
               'context_best_log_prob'):
    values = arrays.get(name)
    if values is not None and (np.isnan(values).any()
                               or (values == np.inf).any()):
      raise refuse(f'{name} holds NaN or +inf log probabilities')
  return int(order), arrays


def build(sentences: Iterable[Sequence[int]], *, order: int, vocab_size: int,
          bos_id: int, eos_id: int) -> NgramModel:
  """Counts a corpus and smooths it (interpolated Kneser-Ney).

  Args:
    sentences: token id sequences (eos_id appended where missing); each is
      preceded by order - 1 bos_id, the context the decoder gives the first
      tokens of an output.
    order: n >= 1.
    vocab_size: ids lie in [0, vocab_size).
    bos_id, eos_id: sentence start padding and end.

  Returns:
    the NgramModel.
  """
  if not isinstance(order, int) or order < 1:
    raise ValueError(f'n-gram order must be an integer >= 1, got {order!r}.')
  counts = _count(sentences, order, vocab_size, bos_id, eos_id)
  return _device_model(_KneserNey(counts, order, vocab_size, bos_id))


def _count(sentences: Iterable[Sequence[int]], order: int, vocab_size: int,
           bos_id: int, eos_id: int) -> list[collections.Counter]:
  """Raw counts of every n-gram of length 1..order ([0] unused), each
  sentence padded as `build` says."""
  counts = [collections.Counter() for _ in range(order + 1)]  # By length.
  sentences_seen = 0
  for sentence in sentences:
    ids = list(sentence)
    if not ids or ids[-1] != eos_id:
      ids.append(eos_id)
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
      raise ValueError(f'token id {bad[0]} is outside the vocabulary '
                       f'[0, {vocab_size}).')
    padded = (bos_id,) * (order - 1) + tuple(ids)
    for i in range(order - 1, len(padded)):
      for n in range(1, order + 1):
        counts[n][padded[i - n + 1:i + 1]] += 1
    sentences_seen += 1
  if not sentences_seen:
    raise ValueError('the n-gram corpus is empty.')
  return counts


class _KneserNey:
  """The interpolated Kneser-Ney model of raw counts (the module
  docstring's formulas), on the host, in float64.

  Attributes:
    order: n.
    adjusted: a(g) per length ([0] unused): raw at the top order and for
      n-grams opening with the padding; otherwise the number of distinct
      words seen before g.
    totals: per length n, a(h) of each context h (a tuple, oldest word
      first) of the n-grams of that length.
    unigram: [vocab] P(word).
  """

  def __init__(self, counts: list[collections.Counter], order: int,
               vocab_size: int, bos_id: int):
    self.order = order
    adjusted = [None] * (order + 1)
    adjusted[order] = counts[order]
    for n in range(order - 1, 0, -1):
      continuation = collections.Counter()
      for gram in adjusted[n + 1]:
        continuation[gram[1:]] += 1
      adjusted[n] = collections.Counter({
          gram: (counts[n][gram] if gram[0] == bos_id else c)
          for gram, c in continuation.items()})
    self.adjusted = adjusted
    self._discounts = [None] + [_discount(adjusted[n])
                                for n in range(1, order + 1)]
    # Per context: a(h) and N1+(h .).
    self.totals = [collections.Counter() for _ in range(order + 1)]
    self._types = [collections.Counter() for _ in range(order + 1)]
    for n in range(1, order + 1):
      for gram, c in adjusted[n].items():
        self.totals[n][gram[:-1]] += c
        self._types[n][gram[:-1]] += 1
    unigram = np.full(vocab_size, self.backoff(1, ()) / vocab_size)
    for (word,), c in adjusted[1].items():
      unigram[word] += max(c - self._discounts[1], 0.0) / self.totals[1][()]
    self.unigram = unigram

  def backoff(self, n: int, context: tuple) -> float:
    """gamma(h) of a seen context h of the n-grams of length n."""
    return (self._discounts[n] * self._types[n][context]
            / self.totals[n][context])

  def prob(self, context: tuple, word: int) -> float:
    """P(word | context) (orders up to len(context) + 1)."""
    while context and context not in self.totals[len(context) + 1]:
      context = context[1:]
    if not context:
      return self.unigram[word]
    n = len(context) + 1
    value = self.backoff(n, context) * self.prob(context[1:], word)
    c = self.adjusted[n].get(context + (word,), 0)
    return value + max(c - self._discounts[n], 0.0) / self.totals[n][context]


def _device_model(model: _KneserNey) -> NgramModel:
  """The model as sorted device arrays: the context trie, the seen
  n-grams' probabilities and the unigram table (see NgramModel)."""
  # Context nodes, order by order; each order's (parent, word) keys sorted,
  # and parents of longer contexts have larger ids: the concatenation is
  # sorted too.
  node = {(): 0}
  parents, words, log_backoffs = [], [], [0.0]
  for length in range(1, model.order):
    keys = sorted((node[context[1:]], context[0], context)
                  for context in model.totals[length + 1])
    for parent, word, context in keys:
      node[context] = len(parents) + 1
      parents.append(parent)
      words.append(word)
      log_backoffs.append(math.log(model.backoff(length + 1, context)))
  entries = sorted(
      (node[gram[:-1]], gram[-1], gram) for n in range(2, model.order + 1)
      for gram in model.adjusted[n])
  arrays = dict(
      context_parent=np.array(parents, np.int32),
      context_word=np.array(words, np.int32),
      context_log_backoff=np.array(log_backoffs, np.float32),
      entry_context=np.array([e[0] for e in entries], np.int32),
      entry_word=np.array([e[1] for e in entries], np.int32),
      entry_log_prob=np.log(np.array(
          [model.prob(g[:-1], g[-1]) for _, _, g in entries],
          np.float64)).astype(np.float32),
      unigram_log_prob=np.log(model.unigram).astype(np.float32))
  best_word, best_log_prob = greedy_table(**arrays)
  return NgramModel(order=model.order, context_best_word=best_word,
                    context_best_log_prob=best_log_prob,
                    **{name: jnp.asarray(a) for name, a in arrays.items()})


def greedy_table(*, context_parent, context_log_backoff, entry_context,
                 entry_word, entry_log_prob, unigram_log_prob, **_
                 ) -> tuple[jax.Array, jax.Array]:
  """(best word [C + 1], its log probability [C + 1]): the argmax of
  P(. | h) for every context node h, exactly, in one pass over the nodes
  from short contexts to long.

  Why one candidate from below suffices: P(w | h) is the stored value for
  a word seen after h, and gamma(h) P(w | h') for any other. A seen
  word's stored value is at least its back-off value (the interpolated
  form adds a non-negative discounted count to it). So if h' 's best
  word b is unseen after h, the best unseen word is b, at gamma(h)
  P(b | h'); if b is seen after h, its stored value already beats every
  unseen word. The best of h is then the best seen word or b.
  """
  parent = np.concatenate([[0], np.asarray(context_parent)])
  log_backoff = np.asarray(context_log_backoff, np.float64)
  contexts = np.asarray(entry_context, np.int64)
  words = np.asarray(entry_word, np.int64)
  log_probs = np.asarray(entry_log_prob, np.float64)
  unigram = np.asarray(unigram_log_prob, np.float64)
  nodes = len(parent)
  # The best seen word of each node (entries sorted by context, then by
  # descending probability: a node's first entry).
  seen_word = np.full(nodes, -1, np.int64)
  seen_log_prob = np.full(nodes, -np.inf)
  by_probability = np.lexsort((-log_probs, contexts))
  first = by_probability[np.unique(contexts[by_probability],
                                   return_index=True)[1]]
  seen_word[contexts[first]] = words[first]
  seen_log_prob[contexts[first]] = log_probs[first]
  keys = contexts * len(unigram) + words  # Sorted: (context, word) pairs.
  best_word = np.zeros(nodes, np.int64)
  best_log_prob = np.zeros(nodes)
  best_word[0], best_log_prob[0] = np.argmax(unigram), np.max(unigram)
  depth = np.zeros(nodes, np.int64)
  for node in range(1, nodes):  # Parents first: ids grow with length.
    depth[node] = depth[parent[node]] + 1
  for level in range(1, int(depth.max(initial=0)) + 1):
    at = np.flatnonzero(depth == level)
    below_word = best_word[parent[at]]
    below_log_prob = best_log_prob[parent[at]] + log_backoff[at]
    key = at * len(unigram) + below_word
    index = np.minimum(np.searchsorted(keys, key), max(len(keys) - 1, 0))
    seen_below = (keys[index] == key) if len(keys) else np.zeros(
        len(at), bool)
    take_below = ~seen_below & (below_log_prob > seen_log_prob[at])
    best_word[at] = np.where(take_below, below_word, seen_word[at])
    best_log_prob[at] = np.where(take_below, below_log_prob,
                                 seen_log_prob[at])
  return (jnp.asarray(best_word.astype(np.int32)),
          jnp.asarray(best_log_prob.astype(np.float32)))


def next_token(model: NgramModel, context: jax.Array
               ) -> tuple[jax.Array, jax.Array]:
  """The greedy continuation's next token on device: (argmax of P(. |
  context) [...], the length of the longest suffix of the context the
  model has seen [...]).

  Args:
    model: the NgramModel.
    context: [..., order - 1] int the preceding tokens, oldest first.
  """
  n = model.order
  found_context = jnp.ones(context.shape[:-1], bool)
  node = jnp.zeros(context.shape[:-1], jnp.int32)
  found = jnp.zeros(context.shape[:-1], jnp.int32)
  for length in range(1, n):  # As `log_prob`: the suffix trie, walked.
    index, hit = _search(model.context_parent, model.context_word, node,
                         context[..., n - 1 - length])
    found_context = found_context & hit
    node = jnp.where(found_context, index + 1, node)
    found = found + found_context
  return model.context_best_word[node], found


def _discount(adjusted: collections.Counter) -> float:
  """D = n1 / (n1 + 2 n2) from the counts of counts (0.5 without both)."""
  n1 = sum(1 for c in adjusted.values() if c == 1)
  n2 = sum(1 for c in adjusted.values() if c == 2)
  return n1 / (n1 + 2 * n2) if n1 and n2 else 0.5


def log_prob(model: NgramModel, context: jax.Array,
             word: jax.Array) -> jax.Array:
  """log P(word | context) on device, for any batch of queries.

  Args:
    model: the NgramModel.
    context: [..., order - 1] int the preceding tokens, oldest first (bos_id
      where the output is shorter than the context).
    word: [...] int the predicted token.

  Returns:
    [...] float32; exp of it sums to 1 over the vocabulary for any context.
  """
  n = model.order
  if context.shape[-1] != n - 1:
    raise ValueError(f'a {n}-gram context has {n - 1} tokens; got '
                     f'{context.shape[-1]}.')
  result = model.unigram_log_prob[word]
  found_context = jnp.ones(word.shape, bool)
  node = jnp.zeros(word.shape, jnp.int32)
  # Longer contexts come later and override, each adding its back-off to
  # whatever the shorter ones gave (the back-off chain, unrolled).
  for length in range(1, n):
    index, hit = _search(model.context_parent, model.context_word, node,
                         context[..., n - 1 - length])
    found_context = found_context & hit
    node = jnp.where(found_context, index + 1, 0)
    entry, seen = _search(model.entry_context, model.entry_word, node, word)
    seen = seen & found_context
    backoff = jnp.where(found_context, model.context_log_backoff[node], 0.)
    result = jnp.where(seen, model.entry_log_prob[entry], result + backoff)
  return result


def _search(keys_a: jax.Array, keys_b: jax.Array, a: jax.Array,
            b: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Binary search of (a, b) among lexicographically sorted (keys_a, keys_b).

  Args:
    keys_a, keys_b: [N] int32 sorted pairs.
    a, b: [...] int32 queries.

  Returns:
    (index [...] of the pair where found, found [...] bool).
  """
  size = keys_a.shape[0]
  if size == 0:
    return jnp.zeros(a.shape, jnp.int32), jnp.zeros(a.shape, bool)
  def halve(_, bounds):
    low, high = bounds
    middle = (low + high) // 2
    at = jnp.minimum(middle, size - 1)
    key_a, key_b = keys_a[at], keys_b[at]
    below = (key_a < a) | ((key_a == a) & (key_b < b))
    return (jnp.where(below & (low < high), middle + 1, low),
            jnp.where(~below & (low < high), middle, high))

  # A fixed number of halvings (static shapes), as a loop: unrolled, the
  # searches of a decoding step made programs that took minutes to compile.
  low, _ = jax.lax.fori_loop(
      0, size.bit_length(), halve,
      (jnp.zeros(a.shape, jnp.int32), jnp.full(a.shape, size, jnp.int32)))
  at = jnp.minimum(low, size - 1)
  return at, (low < size) & (keys_a[at] == a) & (keys_b[at] == b)


def bind(refinement, model: NgramModel, *, vocab_size: int, start_id: int):
  """The n-gram rescorer's part of a decode (see `rescorers.bind`)."""
  if not isinstance(model, NgramModel):
    raise ValueError("rescorer 'ngram' needs a rescorers.ngram.NgramModel.")
  if model.vocab_size != vocab_size:
    raise ValueError(f'the n-gram model has a vocabulary of '
                     f'{model.vocab_size}, the decoded model {vocab_size}.')
  refinement = dataclasses.replace(refinement, context=model.order - 1,
                                   start_id=start_id)
  return refinement, model, None


def function(structure, arguments: NgramModel):
  """(context, word) -> log P(word | context), inside the compiled decode."""
  del structure  # The model is a pytree of arrays: nothing static.
  return functools.partial(log_prob, arguments)
