"""Vocabularies: word lists and SentencePiece."""

import pytest

from bpd_jax.tasks.text import vocab as vocab_lib


def test_word_vocabulary_round_trip():
  vocab = vocab_lib.WordVocabulary(['the', 'dog', 'sleeps', '.', 'dog'])
  assert vocab.vocab_size == 4 + 4  # Special ids, then distinct words.
  ids = vocab.encode('the dog sleeps .')
  assert min(ids) >= 4
  assert vocab.decode(ids + [vocab_lib.EOS_ID, 7, 7]) == 'the dog sleeps .'
  assert vocab.decode([vocab_lib.BOS_ID] + ids + [vocab_lib.PAD_ID]) == (
      'the dog sleeps .')
  assert vocab.encode('the cat') == [ids[0], vocab_lib.UNK_ID]


def test_word_vocabulary_rejects_special_tokens():
  with pytest.raises(ValueError, match='clash with special tokens'):
    vocab_lib.WordVocabulary(['ok', '</s>'])


def test_sentencepiece_trains_saves_and_reloads(tmp_path):
  sentences = [f'the {a} {n} sees a {b} cat .' for a in ('big', 'small', 'old')
               for n in ('dog', 'man', 'bird') for b in ('red', 'black')] * 5
  path = str(tmp_path / 'vocab.model')
  vocab = vocab_lib.SentencePieceVocabulary.train(sentences, path, 40)
  assert not (tmp_path / 'vocab.partial.model').exists()
  reloaded = vocab_lib.SentencePieceVocabulary(path)
  text = 'the old bird sees a red cat .'
  assert reloaded.encode(text) == vocab.encode(text)
  assert reloaded.decode(vocab.encode(text) + [vocab_lib.EOS_ID]) == text
  assert reloaded.vocab_size == vocab.vocab_size


def test_sentencepiece_missing_file(tmp_path):
  with pytest.raises(FileNotFoundError, match='not found'):
    vocab_lib.SentencePieceVocabulary(str(tmp_path / 'none.model'))


def test_fingerprints_tell_vocabularies_of_one_size_apart(tmp_path):
  words = vocab_lib.WordVocabulary(['a', 'cat'])
  assert words.fingerprint == vocab_lib.WordVocabulary(['a', 'cat']).fingerprint
  assert words.fingerprint != vocab_lib.WordVocabulary(['cat', 'a']).fingerprint
  english = [f'the {a} {n} sees a {b} cat .' for a in ('big', 'small', 'old')
             for n in ('dog', 'man', 'bird') for b in ('red', 'black')] * 5
  german = [f'der {a} {n} sieht eine {b} katze .' for a in ('gross', 'alt')
            for n in ('hund', 'mann', 'vogel') for b in ('rot', 'schwarz')] * 5
  first = vocab_lib.SentencePieceVocabulary.train(
      english, str(tmp_path / 'a.model'), 25)
  second = vocab_lib.SentencePieceVocabulary.train(
      german, str(tmp_path / 'b.model'), 25)
  assert first.vocab_size == second.vocab_size
  assert first.fingerprint != second.fingerprint
  again = vocab_lib.SentencePieceVocabulary(str(tmp_path / 'a.model'))
  assert again.fingerprint == first.fingerprint
  assert len(first.fingerprint) == 16
  # The default (each id's text) of any other vocabulary tells them apart.
  default = vocab_lib.Vocabulary.fingerprint.fget
  assert default(first) != default(second)
