"""A Hugging Face checkpoint's own tokenizer, with the checkpoint's ids.

    vocab = hf_vocab.HFVocabulary('/path/to/Llama-3.2-1B')
    prompt = vocab.encode('The meaning of life', add_special_tokens=True)
    text = vocab.decode(output_ids)  # Up to the first eos.

tokenizer.json, read by the `tokenizers` library (Llama 3's and Qwen2's
byte-level BPE, Llama 2's and TinyLlama's SentencePiece models as
transformers converts them, GPT-2's): the ids are the checkpoint's,
unchanged (no reserved ids, unlike the project's own vocabularies), so
that prompts and outputs are those of transformers and its tokenizer.
As there, a special token written in the text ("<|im_start|>") is encoded
as that token.

The special ids are those models/imports gives the checkpoint's model
(llama.special_ids, mirrored here: tasks/ may not import models/), so a
job's check that the model's and the vocabulary's ids agree holds for
every imported folder. They come from generation_config.json, else
config.json, as transformers' generate takes them: eos_id is the first end
id (eos_token_id may be a list: Llama 3 Instruct, Qwen2 Instruct) and
stop_ids the others, each of which ends a decode and `decode`; bos_id is
bos_token_id (eos_id where none is named: a decoder-only text then starts
after an end token); pad_id is pad_token_id where that is none of those,
else -1 (no id pads: Llama 3 has no pad, Qwen2's pad is its end token).
tokenizer_config.json's token names are not read: the model's config
files decide, as for generate.

The vocabulary's size is the embedding's rows, config.json's vocab_size,
which may exceed the tokenizer's ids (Qwen2 pads its embedding to a
multiple of 128); an id of the tokenizer without a row stops with
errors.DataError.
"""

import os
from typing import Sequence

import tokenizers

from bpd_jax.infra import errors
from bpd_jax.infra import json_files
from bpd_jax.tasks.text import vocab as vocab_lib

TOKENIZER_FILE = 'tokenizer.json'
GENERATION_CONFIG_FILE = 'generation_config.json'
CONFIG_FILE = 'config.json'
# The files the special ids are read from, the first that names one wins.
ID_FILES = (GENERATION_CONFIG_FILE, CONFIG_FILE)


class HFVocabulary(vocab_lib.Vocabulary):
  """tokenizer.json of a Hugging Face model folder, and its special ids.

  Attributes:
    eos_id: the first end id.
    stop_ids: the other end ids.
    bos_id: the id a text starts with.
    pad_id: the padding id, or -1 (no id pads).
  """

  def __init__(self, folder: str):
    """Reads FOLDER/tokenizer.json and the config files beside it.

    Raises:
      errors.MissingFileError: tokenizer.json is missing.
      errors.DataError: a file cannot be read or parsed; the folder names
        no eos; a special id is not one of the embedding's rows; the
        tokenizer has ids past config.json's vocab_size.
    """
    path = os.path.join(folder, TOKENIZER_FILE)
    if not os.path.isfile(path):
      raise errors.MissingFileError(
          f'{path} not found: a Hugging Face model folder keeps its '
          f'tokenizer there (a folder with only tokenizer.model, a '
          f'SentencePiece file, is converted by loading it with '
          f"transformers' AutoTokenizer and saving it).")
    try:
      with open(path, 'rb') as f:
        self._file = f.read()
      self._tokenizer = tokenizers.Tokenizer.from_str(
          self._file.decode('utf-8'))
    except OSError as e:
      raise errors.DataError(f'{path} cannot be read: {e.strerror}.') from None
    except Exception as e:  # tokenizers raises a plain Exception.
      raise errors.DataError(f'{path} is not a tokenizers file: '
                             f'{_one_line(e)}') from None
    ids = self._tokenizer.get_vocab(with_added_tokens=True)
    self._tokenizer_size = max(ids.values()) + 1
    config = json_files.read_object(os.path.join(folder, CONFIG_FILE),
                                     optional=True)
    rows = config.get('vocab_size')
    self._vocab_size = rows if _is_id(rows) else self._tokenizer_size
    if self._tokenizer_size > self._vocab_size:
      token = max(ids, key=ids.get)
      raise errors.DataError(
          f'{path} gives {token!r} the id {ids[token]}, but '
          f'{os.path.join(folder, CONFIG_FILE)} gives the embedding '
          f'vocab_size={self._vocab_size} rows: every id needs a row (are '
          f'they of the same model?).')
    sources = [(os.path.join(folder, name), json_files.read_object(
        os.path.join(folder, name), optional=True)) for name in ID_FILES]
    eos = self._special_ids('eos', sources)
    if not eos:
      raise errors.DataError(
          f'{folder} names no eos_token_id ({" nor ".join(ID_FILES)}): '
          f'decodes would never end.')
    self.eos_id, self.stop_ids = eos[0], eos[1:]
    self.bos_id = (self._special_ids('bos', sources) or eos)[0]
    pad = self._special_ids('pad', sources)
    self.pad_id = (pad[0] if pad and pad[0] not in (*eos, self.bos_id)
                   else -1)

  def _special_ids(self, name: str, sources) -> tuple[int, ...]:
    """The first source's {name}_token_id ('bos', ...: an id or a list),
    without repeats; () where none names one."""
    for path, fields in sources:
      value = fields.get(f'{name}_token_id')
      if value is None or value == []:
        continue
      ids = value if isinstance(value, list) else [value]
      for token in ids:
        if not _is_id(token) or token >= self._vocab_size:
          raise errors.DataError(
              f'{path} has {name}_token_id={value!r}; ids are '
              f'0..{self._vocab_size - 1}.')
      return tuple(dict.fromkeys(ids))
    return ()

  @property
  def vocab_size(self) -> int:
    """The embedding's rows (config.json's vocab_size; the tokenizer's ids
    where the folder has no config.json)."""
    return self._vocab_size

  @property
  def fingerprint(self) -> str:
    """The hash of tokenizer.json's bytes (see Vocabulary)."""
    return vocab_lib.fingerprint_of(self._file)

  def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
    """The text's ids; with add_special_tokens, what the tokenizer adds
    around a text too (Llama's bos, nothing for Qwen2), as transformers'
    tokenizer(text) does by default."""
    return self._tokenizer.encode(
        text, add_special_tokens=add_special_tokens).ids

  def encode_many(self, texts: Sequence[str],
                  add_special_tokens: bool = False) -> list[list[int]]:
    return [encoding.ids for encoding in self._tokenizer.encode_batch(
        list(texts), add_special_tokens=add_special_tokens)]

  def _decode_ids(self, ids):
    """The text of ids, special tokens (chat markers) left out; ids past
    the tokenizer's (embedding rows it does not use) decode to nothing, as
    in `tokenizers`."""
    return self._tokenizer.decode(ids, skip_special_tokens=True)


def _is_id(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _one_line(error: Exception) -> str:
  return ' '.join(str(error).split())
