"""A drafting vocabulary: the ids proposals are chosen from (after FR-Spec).

A proposal's logits cost a [d_model, vocab_size] product per drafted
position; drafters that draft head after head (sequential heads, the draft
layer) pay it k - 1 times in series each call. Most accepted tokens are
frequent ones, so choosing proposals among the n most frequent ids of the
training targets costs n / vocab_size of that product and few accepted
tokens. Verification still reads the whole vocabulary
(`generate.Decoder(draft_vocab=...)`): the output is unchanged, only
acceptance and the time per call move.

    ids = draft_vocab.most_frequent(targets, vocab_size=4000, size=1000)
    decoder = generate.Decoder(model, draft_vocab=ids)
"""

from collections.abc import Iterable, Sequence

import numpy as np

from bpd_jax.infra import errors

# Training examples counted (the first ones): enough for the frequent ids of
# any vocabulary here, without reading a whole large corpus (WMT14's 4.5M
# pairs) before a job decodes.
COUNTED_EXAMPLES = 100_000


def most_frequent(sequences: Iterable[Sequence[int]], *, vocab_size: int,
                  size: int) -> np.ndarray:
  """[size] int32 ids, ascending: the `size` ids that occur most often in
  `sequences` (ties to the lower id; ids that never occur fill up last,
  lowest first).

  Args:
    sequences: token id lists (e.g. training targets); negative ids
      (padding of a vocabulary without a pad token) are not counted.
    vocab_size: ids are in [0, vocab_size).
    size: how many ids, 1 <= size <= vocab_size.

  Raises:
    ValueError: size out of range, or an id >= vocab_size.
  """
  if not 1 <= size <= vocab_size:
    raise ValueError(f'a drafting vocabulary of {size} ids: it must hold '
                     f'1 .. {vocab_size} (the vocabulary\'s size).')
  counts = np.zeros(vocab_size, np.int64)
  for ids in sequences:
    ids = np.asarray(ids, np.int64)
    ids = ids[ids >= 0]
    if ids.size and ids.max() >= vocab_size:
      raise ValueError(f'token id {ids.max()} is outside the vocabulary of '
                       f'{vocab_size}.')
    counts += np.bincount(ids, minlength=vocab_size)
  # A stable sort of the negated counts: equal counts keep the lower id.
  order = np.argsort(-counts, kind='stable')
  return np.sort(order[:size]).astype(np.int32)


def of_task(task, size: int) -> np.ndarray | None:
  """The `size` most frequent ids of the task's first COUNTED_EXAMPLES
  training targets (a job's eval.draft_vocab_size); None for size 0 (the
  whole vocabulary).

  Raises:
    errors.ConfigError: size above the task's vocabulary.
  """
  if not size:
    return None
  vocab_size = task.vocab.vocab_size
  if size > vocab_size:
    raise errors.ConfigError(
        f'eval.draft_vocab_size={size} is more ids than the vocabulary '
        f'holds ({vocab_size}); 0 drafts among all of them.')
  examples = task.encoded('train')
  targets = (examples[i][1] for i in range(min(len(examples),
                                               COUNTED_EXAMPLES)))
  return most_frequent(targets, vocab_size=vocab_size, size=size)
