"""A Hugging Face checkpoint's own tokenizer, with the checkpoint's ids.

    vocab = hf_vocab.HFVocabulary('/path/to/Llama-3.2-1B')
    prompt = vocab.encode('The meaning of life', add_special_tokens=True)
    text = vocab.decode(output_ids)  # Up to the first eos.

tokenizer.json, read by the `tokenizers` library (Llama 3's and Qwen2's
byte-level BPE, Llama 2's and TinyLlama's SentencePiece models as
transformers converts them): the ids are the checkpoint's, unchanged (no
reserved ids, unlike the project's own vocabularies and GPT2Vocabulary),
so that prompts and outputs are those of transformers and its tokenizer.
As there, a special token written in the text ("<|im_start|>") is encoded
as that token.

The special ids come from the folder's files, as transformers' generate
takes them: generation_config.json first, then config.json
(bos_token_id, eos_token_id, pad_token_id), then tokenizer_config.json
(bos_token, eos_token, pad_token, named by their text). eos_token_id may be
a list (Llama 3 Instruct, Qwen2 Instruct): every id of `eos_ids` ends
decoding, as any of them stops generate. A checkpoint may have no pad
(Llama 3) or no bos (Qwen2's tokenizer config).

The vocabulary's size is the embedding's rows, config.json's vocab_size,
which may exceed the tokenizer's ids (Qwen2 pads its embedding to a
multiple of 128); an id of the tokenizer without a row stops with
errors.DataError, as in gpt2_vocab.
"""

import json
import os
from typing import Sequence

import tokenizers

from bpd_jax.infra import errors
from bpd_jax.tasks.text import vocab as vocab_lib

TOKENIZER_FILE = 'tokenizer.json'
TOKENIZER_CONFIG_FILE = 'tokenizer_config.json'
GENERATION_CONFIG_FILE = 'generation_config.json'
CONFIG_FILE = 'config.json'
SPECIALS = ('bos', 'eos', 'pad')


class HFVocabulary(vocab_lib.Vocabulary):
  """tokenizer.json of a Hugging Face model folder, and its special ids.

  Attributes:
    bos_id: the id a text starts with, or None.
    eos_ids: the ids that end decoding (at least one).
    pad_id: the padding id, or None.
  """

  def __init__(self, folder: str):
    """Reads FOLDER/tokenizer.json and the config files beside it.

    Raises:
      errors.MissingFileError: tokenizer.json is missing.
      errors.DataError: a file cannot be read or parsed; the folder names
        no eos; a special id or token is not one of the tokenizer's (or of
        the embedding's rows); the tokenizer has ids past config.json's
        vocab_size.
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
    self._path = path
    ids = self._tokenizer.get_vocab(with_added_tokens=True)
    self._tokenizer_size = max(ids.values()) + 1
    config = _optional_json(os.path.join(folder, CONFIG_FILE))
    rows = config.get('vocab_size')
    self._vocab_size = rows if _is_id(rows) else self._tokenizer_size
    if self._tokenizer_size > self._vocab_size:
      token = max(ids, key=ids.get)
      raise errors.DataError(
          f'{path} gives {token!r} the id {ids[token]}, but '
          f'{os.path.join(folder, CONFIG_FILE)} gives the embedding '
          f'vocab_size={self._vocab_size} rows: every id needs a row (are '
          f'they of the same model?).')
    sources = [(os.path.join(folder, name), _optional_json(
        os.path.join(folder, name))) for name in (GENERATION_CONFIG_FILE,
                                                  CONFIG_FILE)]
    tokenizer_config = os.path.join(folder, TOKENIZER_CONFIG_FILE)
    sources.append((tokenizer_config, _optional_json(tokenizer_config)))
    special = {name: self._special_ids(name, sources) for name in SPECIALS}
    if not special['eos']:
      raise errors.DataError(
          f'{folder} names no eos: {GENERATION_CONFIG_FILE} or '
          f'{CONFIG_FILE} (eos_token_id) or {TOKENIZER_CONFIG_FILE} '
          f'(eos_token) must.')
    self.bos_id = special['bos'][0] if special['bos'] else None
    self.eos_ids = special['eos']
    self.pad_id = special['pad'][0] if special['pad'] else None

  def _special_ids(self, name: str, sources) -> tuple[int, ...]:
    """The first source's ids of special token `name` ('bos', ...): its
    {name}_token_id (an id or a list), or its {name}_token (text)."""
    for path, fields in sources:
      ids = fields.get(f'{name}_token_id')
      if ids is not None:
        ids = tuple(ids) if isinstance(ids, list) else (ids,)
        for token in ids:
          if not _is_id(token) or token >= self._vocab_size:
            raise errors.DataError(
                f'{path} has {name}_token_id={fields[f"{name}_token_id"]!r}; '
                f'ids are 0..{self._vocab_size - 1}.')
        return ids
      token = fields.get(f'{name}_token')
      if isinstance(token, dict):  # An AddedToken: {'content': ..., ...}.
        token = token.get('content')
      if isinstance(token, str):
        token_id = self._tokenizer.token_to_id(token)
        if token_id is None:
          raise errors.DataError(f'{path} has {name}_token={token!r}, which '
                                 f'{self._path} does not have.')
        return (token_id,)
    return ()

  @property
  def vocab_size(self) -> int:
    """The embedding's rows (config.json's vocab_size; the tokenizer's ids
    where the folder has no config.json)."""
    return self._vocab_size

  @property
  def eos_id(self) -> int:
    """The first of eos_ids, for code that takes one."""
    return self.eos_ids[0]

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

  def decode(self, ids: Sequence[int]) -> str:
    """Text of ids up to the first eos, special tokens (bos, pad, chat
    markers) left out; ids past the tokenizer's (embedding rows it does
    not use) decode to nothing, as in `tokenizers`."""
    ids = [int(i) for i in ids]
    ends = [k for k, i in enumerate(ids) if i in self.eos_ids]
    return self._decode_ids(ids[:ends[0]] if ends else ids)

  def _decode_ids(self, ids):
    return self._tokenizer.decode(ids, skip_special_tokens=True)


def _is_id(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _optional_json(path: str) -> dict:
  """The JSON object in `path`, {} when there is no such file.

  (models/imports/reader.py reads the same files for the importers; the
  layers keep tasks/ from importing it.)
  """
  if not os.path.exists(path):
    return {}
  try:
    with open(path, encoding='utf-8') as f:
      value = json.load(f)
  except json.JSONDecodeError as e:
    raise errors.DataError(f'{path} is not JSON (line {e.lineno}, column '
                           f'{e.colno}: {e.msg}).') from None
  except (OSError, UnicodeDecodeError) as e:
    raise errors.DataError(f'{path} cannot be read as UTF-8 JSON: '
                           f'{_one_line(e)}') from None
  if not isinstance(value, dict):
    raise errors.DataError(f'{path} holds a {type(value).__name__}, not a '
                           f'JSON object.')
  return value


def _one_line(error: Exception) -> str:
  return ' '.join(str(error).split())
