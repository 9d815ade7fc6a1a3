"""GPT-2's byte-level BPE tokenizer, in the project's ids.

The vocabulary of an imported GPT-2 (models/gpt2.py): vocab.json and
merges.txt from the same checkpoint directory, read by the `tokenizers`
library. Its ids go through infra/gpt2_ids.py, the mapping the
importer lays out the embedding with: <|endoftext|> is eos 1, the other
GPT-2 ids follow from 4 on.

Every id the tokenizer has must have a row in the model's embedding: its
ids are checked against its size, and that size against the folder's
config.json vocab_size (the embedding's rows), when it is read; an id
without a row used to train into a NaN loss.

Text is text: "<|endoftext|>" written in it is encoded as the characters
it is made of, as the other vocabularies encode "</s>"; a prompt that
should start as GPT-2's texts do starts with the model's bos_id (eos 1).
"""

import itertools
import json
import os

import numpy as np
import tokenizers

from bpd_jax.infra import errors
from bpd_jax.infra import gpt2_ids
from bpd_jax.tasks.text import vocab as vocab_lib

ENDOFTEXT = '<|endoftext|>'
VOCAB_FILE = 'vocab.json'
MERGES_FILE = 'merges.txt'
# The checkpoint's config, beside the tokenizer: its vocab_size is the
# embedding's rows (models/gpt2.py).
CONFIG_FILE = 'config.json'
# What unk decodes to: GPT-2 has no unknown token, and this is what its
# byte-level decoder writes for bytes that are not UTF-8.
UNK_TEXT = '\N{REPLACEMENT CHARACTER}'


def check_ids(ids: dict[str, int], size: int, origin: str) -> None:
  """Raises errors.DataError unless every token's id is below `size`.

  The model's embedding has a row for each of the tokenizer's `size` ids
  (the project's vocabulary size follows from it, infra/gpt2_ids.py); an
  id past them reads no row, and training turns it into a NaN loss.

  Args:
    ids: {token: GPT-2 id}, vocab.json's and any added token's.
    size: the tokenizer's number of tokens.
    origin: the file named in the message.
  """
  token, largest = max(ids.items(), key=lambda item: item[1])
  if largest >= size:
    raise errors.DataError(
        f'{origin} gives {token!r} the id {largest}, but the tokenizer has '
        f'{size} tokens: ids must be 0..{size - 1}, one per row of the '
        f"model's embedding.")


def check_embedding_rows(directory: str, size: int, origin: str) -> None:
  """Raises errors.DataError if DIRECTORY/config.json's vocab_size (the
  rows of the checkpoint's embedding) is not the tokenizer's `size`.

  A folder without a readable config.json is not checked here: the
  checkpoint's importer reports what is wrong with it (models/gpt2.py).
  """
  path = os.path.join(directory, CONFIG_FILE)
  try:
    with open(path, encoding='utf-8') as f:
      rows = json.load(f).get('vocab_size')
  except (OSError, ValueError, AttributeError):
    return
  if isinstance(rows, int) and rows != size:
    raise errors.DataError(
        f'{origin} has {size} tokens, but {path} gives the embedding '
        f'vocab_size={rows} rows: the tokenizer and the checkpoint must '
        f'have one row per token (are they of the same model?).')


class GPT2Vocabulary(vocab_lib.Vocabulary):
  """GPT-2's tokenizer from a checkpoint directory, in the project's ids."""

  bos_id = vocab_lib.EOS_ID  # <|endoftext|> starts a text (models/gpt2.py).

  def __init__(self, directory: str):
    """Reads DIRECTORY/vocab.json and DIRECTORY/merges.txt.

    Raises:
      errors.MissingFileError: either file is missing.
      errors.DataError: they cannot be read, the vocabulary has no
        <|endoftext|>, an id is not one of the embedding's rows, or the
        folder's config.json gives the embedding another number of rows.
    """
    paths = [os.path.join(directory, name)
             for name in (VOCAB_FILE, MERGES_FILE)]
    for path in paths:
      if not os.path.isfile(path):
        raise errors.MissingFileError(
            f'{path} not found: GPT-2\'s tokenizer is {VOCAB_FILE} and '
            f'{MERGES_FILE} in the checkpoint directory.')
    try:
      self._tokenizer = tokenizers.ByteLevelBPETokenizer.from_file(*paths)
    except Exception as e:  # tokenizers raises a plain Exception.
      raise errors.DataError(f'{paths[0]} and {paths[1]} are not a BPE '
                             f'vocabulary: {e}') from None
    self._endoftext = self._tokenizer.token_to_id(ENDOFTEXT)
    if self._endoftext is None:
      raise errors.DataError(f'{paths[0]} has no {ENDOFTEXT} token.')
    self._gpt2_vocab_size = self._tokenizer.get_vocab_size()
    check_ids(self._tokenizer.get_vocab(with_added_tokens=True),
              self._gpt2_vocab_size, paths[0])
    check_embedding_rows(directory, self._gpt2_vocab_size, paths[0])

  @property
  def vocab_size(self) -> int:
    return gpt2_ids.vocab_size(self._gpt2_vocab_size)

  @property
  def endoftext_id(self) -> int:
    """GPT-2's own id of <|endoftext|>."""
    return self._endoftext

  def encode(self, text: str) -> list[int]:
    return self._project(self._tokenizer.encode(text))

  def encode_many(self, texts):
    return [self._project(encoding)
            for encoding in self._tokenizer.encode_batch(list(texts))]

  def _project(self, encoding: tokenizers.Encoding) -> list[int]:
    """The project's ids of one text's GPT-2 encoding."""
    return gpt2_ids.from_gpt2(np.array(encoding.ids, np.int64),
                              self._endoftext).tolist()

  def _decode_ids(self, ids):
    # Unk (sampling can draw it) has no GPT-2 token: it splits the ids into
    # runs, each decoded whole, since a character's bytes may span tokens.
    pieces = []
    for unk, run in itertools.groupby(ids, lambda i: i == vocab_lib.UNK_ID):
      run = list(run)
      pieces.append(UNK_TEXT * len(run) if unk else self._tokenizer.decode(
          gpt2_ids.to_gpt2(run, self._endoftext).tolist()))
    return ''.join(pieces)
