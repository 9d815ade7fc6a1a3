"""GPT-2 token ids <-> the project's ids: one mapping, for the checkpoint
importer (models/gpt2.py) and the tokenizer (tasks/text/gpt2_vocab.py),
which must agree; here, below both, neither package imports the other.

Every project vocabulary reserves pad 0, eos 1, bos 2 and unk 3
(token_ids.py). GPT-2 has one special token, <|endoftext|> (id 50256
in GPT-2's vocabulary, its last), and no pad or unk. So:

- <|endoftext|> becomes eos 1: GPT-2 ends a text with it and starts the
  next one with it, which is what eos means to decoding (stop) and what an
  imported model's prompt starts with (its config's bos_id is eos 1 too;
  see models/gpt2.py).
- Every other GPT-2 id keeps its order from 4 on: id g < <|endoftext|> is
  g + 4, id g > <|endoftext|> is g + 3. With <|endoftext|> last, as in
  GPT-2, that is g + 4 throughout. (An offset of 3 would put GPT-2's id 0
  on unk.)
- pad 0, bos 2 and unk 3 stand for no GPT-2 token (`UNUSED_IDS`).

The project's vocabulary has GPT-2's size + 3.
"""

import numpy as np

from bpd_jax.infra.token_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID

# Project ids with no GPT-2 token.
UNUSED_IDS = (PAD_ID, BOS_ID, UNK_ID)
# The project's ids of the GPT-2 ids before <|endoftext|> start here.
FIRST_ID = 4


def vocab_size(gpt2_vocab_size: int) -> int:
  """The project's vocabulary size for a GPT-2 vocabulary of this size."""
  return gpt2_vocab_size + len(UNUSED_IDS)


def from_gpt2(ids, endoftext: int) -> np.ndarray:
  """Project ids of GPT-2 ids, any shape.

  Args:
    ids: [...] GPT-2 token ids, in [0, GPT-2 vocabulary size).
    endoftext: GPT-2's id of <|endoftext|>.
  """
  ids = np.asarray(ids)
  if (ids < 0).any():
    raise ValueError(f'GPT-2 id {ids.min()} is negative.')
  shifted = np.where(ids < endoftext, ids + FIRST_ID, ids + FIRST_ID - 1)
  return np.where(ids == endoftext, EOS_ID, shifted)


def to_gpt2(ids, endoftext: int) -> np.ndarray:
  """GPT-2 ids of project ids, any shape: the inverse of `from_gpt2`.

  Args:
    ids: [...] project ids, none of them in UNUSED_IDS.
    endoftext: GPT-2's id of <|endoftext|>.

  Raises:
    ValueError: an id is negative or stands for no GPT-2 token.
  """
  ids = np.asarray(ids)
  unused = np.isin(ids, UNUSED_IDS) | (ids < 0)
  if unused.any():
    raise ValueError(f'project id {ids[unused][0]} stands for no GPT-2 '
                     f'token (unused: {UNUSED_IDS}).')
  shifted = np.where(ids < endoftext + FIRST_ID, ids - FIRST_ID,
                     ids - FIRST_ID + 1)
  return np.where(ids == EOS_ID, endoftext, shifted)
