"""A Hugging Face checkpoint's tokenizer with its own ids, on the tiny
folders of scripts/make_tiny_hf.py: the ids transformers' AutoTokenizer
recorded, text back as `tokenizers` decodes it, the folder's special ids
(those models/imports gives the model)."""

import hashlib
import json
import os
import shutil

import numpy as np
import pytest
import tokenizers

from bpd_jax.infra import errors
from bpd_jax.models import factory
from bpd_jax.models import imports
from bpd_jax.tasks import spec
from bpd_jax.tasks.text import hf_vocab
from bpd_jax.tasks.text import vocab as vocab_lib

DATA = os.path.join(os.path.dirname(__file__), 'data')
FOLDERS = ['tiny_llama3', 'tiny_llama2', 'tiny_mistral', 'tiny_qwen2']


def recorded(name: str):
  """(texts, ids without special tokens, ids with them) of AutoTokenizer."""
  with np.load(os.path.join(DATA, name, 'references.npz')) as data:
    unpad = lambda rows: [[int(i) for i in row if i >= 0] for row in rows]
    return ([str(t) for t in data['tokenizer_text']],
            unpad(data['tokenizer_ids']), unpad(data['tokenizer_ids_special']))


def library(name: str) -> tokenizers.Tokenizer:
  return tokenizers.Tokenizer.from_file(
      os.path.join(DATA, name, 'tokenizer.json'))


@pytest.mark.parametrize('name', FOLDERS)
def test_encode_gives_the_checkpoints_own_ids(name):
  vocab = hf_vocab.HFVocabulary(os.path.join(DATA, name))
  texts, ids, ids_special = recorded(name)
  assert [vocab.encode(text) for text in texts] == ids
  assert vocab.encode_many(texts) == ids
  assert [vocab.encode(t, add_special_tokens=True) for t in texts] == (
      ids_special)
  assert vocab.encode_many(texts, add_special_tokens=True) == ids_special
  tokenizer = library(name)
  assert ids == [tokenizer.encode(t, add_special_tokens=False).ids
                 for t in texts]


@pytest.mark.parametrize('name', FOLDERS)
def test_decode_is_what_tokenizers_decodes(name):
  vocab = hf_vocab.HFVocabulary(os.path.join(DATA, name))
  tokenizer = library(name)
  texts, _, ids_special = recorded(name)
  for text, ids in zip(texts, ids_special):
    assert vocab.decode(ids) == tokenizer.decode(ids,
                                                 skip_special_tokens=True)
    if name in ('tiny_llama3', 'tiny_qwen2'):  # Byte-level: lossless.
      assert vocab.decode(ids) == text


@pytest.mark.parametrize('name, bos, eos, stops, pad, size, tokens', [
    # Three end ids (generation_config.json); no pad.
    ('tiny_llama3', 370, 371, (374, 375), -1, 376,
     ['<|begin_of_text|>', '<|end_of_text|>', '<|eom_id|>', '<|eot_id|>']),
    # tokenizer_config.json's pad_token '</s>' is not read (config.json
    # names none), and is the eos anyway.
    ('tiny_llama2', 1, 2, (), -1, 379, ['<s>', '</s>']),
    ('tiny_mistral', 1, 2, (), -1, 379, ['<s>', '</s>']),
    # generation_config.json's eos list over config.json's eos; its pad
    # is an end token, so no id pads; 384 embedding rows for 380 ids.
    ('tiny_qwen2', 377, 379, (377,), -1, 384,
     ['<|endoftext|>', '<|im_end|>']),
    # <|endoftext|> ends a text and starts the next.
    ('tiny_gpt2', 383, 383, (), -1, 384, ['<|endoftext|>']),
])
def test_special_ids_come_from_the_folder(name, bos, eos, stops, pad, size,
                                          tokens):
  vocab = hf_vocab.HFVocabulary(os.path.join(DATA, name))
  assert (vocab.bos_id, vocab.eos_id, vocab.stop_ids, vocab.pad_id) == (
      bos, eos, stops, pad)
  assert vocab.vocab_size == size
  tokenizer = library(name)
  assert {tokenizer.token_to_id(t) for t in tokens} == {bos, eos, *stops}


@pytest.mark.parametrize('name', FOLDERS + ['tiny_gpt2'])
def test_the_ids_are_those_the_importer_gives_the_model(name):
  folder = os.path.join(DATA, name)
  vocab = hf_vocab.HFVocabulary(folder)
  config = imports.config_from(folder)
  assert [getattr(vocab, n) for n in factory.SPECIAL_IDS] == [
      getattr(config, n) for n in factory.SPECIAL_IDS]
  assert vocab.vocab_size == config.vocab_size


def test_gpt2s_ids_are_those_of_transformers_gpt2_tokenizer():
  # tokenizer.json beside vocab.json and merges.txt (scripts/
  # make_tiny_gpt2.py): the ids transformers' GPT2Tokenizer recorded.
  folder = os.path.join(DATA, 'tiny_gpt2')
  vocab = hf_vocab.HFVocabulary(folder)
  with np.load(os.path.join(folder, 'expected_logits.npz')) as data:
    text, ids = str(data['text']), data['text_ids'].tolist()
  assert vocab.encode(text) == ids == vocab.encode(text,
                                                   add_special_tokens=True)
  assert vocab.decode(ids + [vocab.eos_id] + ids) == text
  code = 'def greet(name):\n    return f"hello, {name}!"\n'
  assert vocab.decode(vocab.encode(code)) == code  # Byte-level: lossless.


def _with_ids(tmp_path, **fields) -> hf_vocab.HFVocabulary:
  """tiny_qwen2 with generation_config.json's ids set to `fields`."""
  folder = _copy(tmp_path)
  _edit(folder, 'generation_config.json', **fields)
  return hf_vocab.HFVocabulary(folder)


def test_a_pad_of_its_own_pads_and_a_missing_bos_is_the_eos(tmp_path):
  vocab = _with_ids(tmp_path, pad_token_id=3, eos_token_id=[379, 379],
                    bos_token_id=None)
  # config.json's bos (377) where generation_config.json names none.
  assert (vocab.pad_id, vocab.eos_id, vocab.stop_ids, vocab.bos_id) == (
      3, 379, (), 377)
  folder = str(tmp_path / 'tiny_qwen2')
  for name in ('generation_config.json', 'config.json'):
    _edit(folder, name, bos_token_id=None)
  assert hf_vocab.HFVocabulary(folder).bos_id == 379


def test_decode_stops_at_any_end_id_and_drops_special_tokens():
  vocab = hf_vocab.HFVocabulary(os.path.join(DATA, 'tiny_llama3'))
  ids = vocab.encode('a café')
  for end in (vocab.eos_id, *vocab.stop_ids):
    assert vocab.decode([vocab.bos_id] + ids + [end] + ids) == 'a café'
  # Outputs are padded with -1 past their end.
  assert vocab.decode(ids + [vocab.pad_id] * 2) == 'a café'
  qwen2 = hf_vocab.HFVocabulary(os.path.join(DATA, 'tiny_qwen2'))
  ids = qwen2.encode('a café')
  start = library('tiny_qwen2').token_to_id('<|im_start|>')
  assert qwen2.decode([start] + ids + [qwen2.eos_id]) == 'a café'
  # Rows past the tokenizer's 380 ids decode to nothing.
  assert qwen2.decode(ids + [380, 383]) == 'a café'


def test_special_tokens_in_text_are_encoded_as_those_tokens():
  qwen2 = hf_vocab.HFVocabulary(os.path.join(DATA, 'tiny_qwen2'))
  ids = qwen2.encode('<|im_start|>user')
  assert ids[0] == library('tiny_qwen2').token_to_id('<|im_start|>')
  llama2 = hf_vocab.HFVocabulary(os.path.join(DATA, 'tiny_llama2'))
  assert llama2.encode('日')[-3:] == [  # Byte fallback: 3 UTF-8 bytes.
      library('tiny_llama2').token_to_id(f'<0x{b:02X}>')
      for b in '日'.encode('utf-8')]


def test_fingerprint_is_the_hash_of_tokenizer_json():
  prints = {}
  for name in FOLDERS:
    with open(os.path.join(DATA, name, 'tokenizer.json'), 'rb') as f:
      digest = hashlib.sha256(f.read()).hexdigest()[:16]
    prints[name] = hf_vocab.HFVocabulary(os.path.join(DATA, name)).fingerprint
    assert prints[name] == digest
  # Llama 2's and Mistral's folders share one tokenizer.
  assert prints['tiny_llama2'] == prints['tiny_mistral']
  assert len(set(prints.values())) == 3


def test_is_a_task_vocabulary():
  vocab = hf_vocab.HFVocabulary(os.path.join(DATA, 'tiny_qwen2'))
  assert isinstance(vocab, vocab_lib.Vocabulary)
  assert isinstance(vocab, spec.Vocab)
  assert not vocab.tokenized_text


def _copy(tmp_path, name='tiny_qwen2') -> str:
  target = tmp_path / name
  shutil.copytree(os.path.join(DATA, name), target)
  return str(target)


def _edit(folder: str, file: str, **fields):
  path = os.path.join(folder, file)
  with open(path, encoding='utf-8') as f:
    data = json.load(f)
  data.update(fields)
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(data, f)


def test_without_config_json_the_size_is_the_tokenizers(tmp_path):
  folder = _copy(tmp_path)
  os.remove(os.path.join(folder, 'config.json'))
  vocab = hf_vocab.HFVocabulary(folder)
  assert vocab.vocab_size == 380
  assert (vocab.eos_id, vocab.stop_ids) == (379, (377,))  # Generation's.


def _write(folder, file, text):
  with open(os.path.join(folder, file), 'w', encoding='utf-8') as f:
    f.write(text)


@pytest.mark.parametrize('breaks, error, message', [
    (lambda d: os.remove(os.path.join(d, 'tokenizer.json')),
     errors.MissingFileError, r'tiny_qwen2/tokenizer.json not found'),
    (lambda d: _write(d, 'tokenizer.json', '{"model": 3}'),
     errors.DataError, r'tiny_qwen2/tokenizer.json is not a tokenizers file'),
    (lambda d: _write(d, 'generation_config.json', '{"eos_token_id": }'),
     errors.DataError,
     r'tiny_qwen2/generation_config.json is not JSON \(line 1, column 18'),
    (lambda d: _edit(d, 'config.json', vocab_size=300), errors.DataError,
     r"tiny_qwen2/tokenizer.json gives '<\|im_end\|>' the id 379, but "
     r'.*config.json gives the embedding vocab_size=300 rows'),
    (lambda d: _edit(d, 'generation_config.json', eos_token_id=[379, 384]),
     errors.DataError,
     r'generation_config.json has eos_token_id=\[379, 384\]; ids are '
     r'0..383'),
    (lambda d: _edit(d, 'generation_config.json', pad_token_id=True),
     errors.DataError,
     r'generation_config.json has pad_token_id=True; ids are 0..383'),
])
def test_broken_folders_are_one_line(tmp_path, breaks, error, message):
  folder = _copy(tmp_path)
  breaks(folder)
  with pytest.raises(error, match=message) as raised:
    hf_vocab.HFVocabulary(folder)
  assert '\n' not in str(raised.value)


def test_a_folder_naming_no_eos(tmp_path):
  # tokenizer_config.json names one, but the model's files decide.
  folder = _copy(tmp_path, 'tiny_mistral')
  for name in ('config.json', 'generation_config.json'):
    _edit(folder, name, eos_token_id=None)
  with pytest.raises(errors.DataError, match=r'tiny_mistral names no '
                     r'eos_token_id \(generation_config.json nor '
                     r'config.json\)'):
    hf_vocab.HFVocabulary(folder)
