"""GPT-2's tokenizer in the project's ids: the ids transformers recorded
for the tiny checkpoint (scripts/make_tiny_gpt2.py), and back to text."""

import json
import os
import shutil

import numpy as np
import pytest

from bpd_jax.infra import errors
from bpd_jax.infra import gpt2_ids
from bpd_jax.infra import token_ids
from bpd_jax.tasks.text import gpt2_vocab

CHECKPOINT = os.path.join(os.path.dirname(__file__), 'data', 'tiny_gpt2')


@pytest.fixture(scope='module')
def vocab():
  return gpt2_vocab.GPT2Vocabulary(CHECKPOINT)


@pytest.fixture(scope='module')
def expected():
  with np.load(os.path.join(CHECKPOINT, 'expected_logits.npz')) as data:
    return str(data['text']), data['text_ids']


def test_encode_gives_transformers_ids_mapped(vocab, expected):
  text, ids = expected
  assert vocab.endoftext_id == 383
  assert vocab.vocab_size == 384 + 3
  want = gpt2_ids.from_gpt2(ids, vocab.endoftext_id).tolist()
  assert vocab.encode(text) == want
  assert vocab.encode_many([text, 'a']) == [want, vocab.encode('a')]
  assert min(want) >= gpt2_ids.FIRST_ID  # No special id, no eos.


def test_decode_round_trip_stops_at_eos_and_drops_pad(vocab, expected):
  text, _ = expected
  ids = vocab.encode(text)
  assert vocab.decode(ids) == text
  assert vocab.bos_id == token_ids.EOS_ID  # GPT-2's texts start after it.
  assert vocab.decode([token_ids.PAD_ID] + ids + [token_ids.EOS_ID] + ids
                      + [token_ids.PAD_ID]) == text
  assert vocab.decode([token_ids.EOS_ID] + ids) == ''


def test_a_character_split_over_tokens_decodes_whole(vocab):
  assert len(vocab.encode('日')) == 3  # Unseen in training: 3 byte tokens.
  ids = vocab.encode('日本 café')
  assert vocab.decode(ids) == '日本 café'
  assert vocab.decode(ids[:2]) == '\N{REPLACEMENT CHARACTER}'  # Half of 日.


def test_unk_decodes_to_the_replacement_character(vocab):
  ids = vocab.encode('a cat')
  assert vocab.decode([token_ids.UNK_ID] + ids + [token_ids.UNK_ID] * 2) == (
      '\N{REPLACEMENT CHARACTER}a cat' + '\N{REPLACEMENT CHARACTER}' * 2)


def test_endoftext_in_text_is_text(vocab):
  ids = vocab.encode('<|endoftext|>')
  assert token_ids.EOS_ID not in ids
  assert vocab.decode(ids) == '<|endoftext|>'


@pytest.mark.parametrize('name', ['vocab.json', 'merges.txt'])
def test_missing_file(tmp_path, name):
  directory = tmp_path / 'gpt2'
  shutil.copytree(CHECKPOINT, directory)
  os.remove(directory / name)
  with pytest.raises(errors.MissingFileError,
                     match=f'gpt2/{name} not found: GPT-2\'s tokenizer is'):
    gpt2_vocab.GPT2Vocabulary(str(directory))


def test_vocabulary_without_endoftext(tmp_path):
  directory = tmp_path / 'gpt2'
  shutil.copytree(CHECKPOINT, directory)
  (directory / 'vocab.json').write_text('{"a": 0, "b": 1, "ab": 2}')
  (directory / 'merges.txt').write_text('#version: 0.2\na b\n')
  with pytest.raises(errors.DataError, match='has no <|endoftext|> token'):
    gpt2_vocab.GPT2Vocabulary(str(directory))


def test_an_id_past_the_embedding_is_refused(tmp_path):
  """An id with no row of the embedding used to train into a NaN loss."""
  directory = tmp_path / 'gpt2'
  shutil.copytree(CHECKPOINT, directory)
  ids = json.loads((directory / 'vocab.json').read_text())
  ids['\u0120'] = 500  # 'Ġ', a leading space: in most texts.
  (directory / 'vocab.json').write_text(json.dumps(ids))
  with pytest.raises(errors.DataError, match=r"gpt2/vocab.json gives 'Ġ' "
                     r'the id 500, but the tokenizer has 384 tokens: ids '
                     r'must be 0..383'):
    gpt2_vocab.GPT2Vocabulary(str(directory))
  # Added tokens count too (the tokenizer's whole vocabulary).
  with pytest.raises(errors.DataError, match="'<extra>' the id 384"):
    gpt2_vocab.check_ids({'a': 0, '<extra>': 384}, 384, 'vocab.json')


def test_a_tokenizer_of_another_size_than_the_embedding_is_refused(
    tmp_path):
  directory = tmp_path / 'gpt2'
  shutil.copytree(CHECKPOINT, directory)
  config = json.loads((directory / 'config.json').read_text())
  (directory / 'config.json').write_text(json.dumps(
      dict(config, vocab_size=300)))
  with pytest.raises(errors.DataError, match=r'gpt2/vocab.json has 384 '
                     r'tokens, but .*gpt2/config.json gives the embedding '
                     r'vocab_size=300 rows'):
    gpt2_vocab.GPT2Vocabulary(str(directory))
  # Without a readable config.json the importer is left to report it.
  (directory / 'config.json').write_text('{')
  assert gpt2_vocab.GPT2Vocabulary(str(directory)).vocab_size == 387
