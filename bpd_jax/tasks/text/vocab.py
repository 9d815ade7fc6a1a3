"""Vocabularies: text <-> token ids, and the special ids a model reads.

Every vocabulary says which ids pad, end and start a sequence (`pad_id`,
`eos_id`, `bos_id`, `stop_ids`): the project's own use pad 0, eos 1, bos 2
and unk 3 (infra/token_ids.py, the defaults of TransformerConfig), an
imported checkpoint's tokenizer its own (hf_vocab.py). Tasks pad, end and
start with these, and a job refuses a model whose ids differ.
`sentencepiece_vocab` finds or trains a task's model.
"""

import abc
import hashlib
import io
import os
from typing import Callable, Iterable, Sequence

import sentencepiece as spm
from absl import logging

from bpd_jax.infra import atomic_files
from bpd_jax.infra.token_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID

VOCAB_TYPES = ('sentencepiece', 'words')
SPECIAL_TOKENS = ('<pad>', '</s>', '<s>', '<unk>')


class Vocabulary(abc.ABC):
  """Maps a sentence to ids (no eos added) and ids back to a sentence.

  Attributes:
    tokenized_text: its text is tokens joined by spaces ("a cat ."), not
      detokenized prose ("a cat."): BLEU then takes it as it is, without
      sacreBLEU's warning that the data looks tokenized.
    pad_id: the id rows are padded with; -1 where no vocabulary id pads.
    eos_id: the id a sequence ends with (tasks append it).
    stop_ids: further ids that end a decode as eos_id does.
    bos_id: the id a decoder's input starts with.
  """

  tokenized_text = False
  pad_id, eos_id, bos_id = PAD_ID, EOS_ID, BOS_ID
  stop_ids: tuple[int, ...] = ()

  @property
  @abc.abstractmethod
  def vocab_size(self) -> int:
    """Number of ids, special ones included."""

  @abc.abstractmethod
  def encode(self, text: str) -> list[int]:
    """Token ids of a sentence, without eos."""

  def encode_many(self, texts: Sequence[str]) -> list[list[int]]:
    """encode() of each text."""
    return [self.encode(text) for text in texts]

  @abc.abstractmethod
  def _decode_ids(self, ids: list[int]) -> str:
    """Text of ids that contain no special id but unk."""

  @property
  def fingerprint(self) -> str:
    """What the ids mean, as 16 hex digits: two vocabularies of one size
    whose ids stand for other text differ here (recorded with a run and a
    distilled corpus, compared by every job that reads them).

    This default hashes each id's text; a vocabulary with a file of its
    own hashes that.
    """
    texts = [self._decode_ids([i]) for i in range(len(SPECIAL_TOKENS),
                                                   self.vocab_size)]
    return fingerprint_of('\n'.join(texts).encode('utf-8', 'surrogatepass'))

  def decode(self, ids: Sequence[int]) -> str:
    """Text of ids up to the first eos (or stop id); pad and bos are
    dropped."""
    ids = [int(i) for i in ids]
    ends = [k for k, i in enumerate(ids) if i in (self.eos_id,
                                                  *self.stop_ids)]
    if ends:
      ids = ids[:ends[0]]
    return self._decode_ids([i for i in ids
                             if i not in (self.pad_id, self.bos_id)])


class WordVocabulary(Vocabulary):
  """Whitespace-separated words, for tasks whose word list is known."""

  tokenized_text = True

  def __init__(self, words: Iterable[str]):
    words = list(dict.fromkeys(words))  # Ordered, without duplicates.
    clash = set(words) & set(SPECIAL_TOKENS)
    if clash:
      raise ValueError(f'words {sorted(clash)} clash with special tokens.')
    self._words = list(SPECIAL_TOKENS) + words
    self._ids = {word: i for i, word in enumerate(self._words)}

  @property
  def vocab_size(self) -> int:
    return len(self._words)

  def encode(self, text: str) -> list[int]:
    return [self._ids.get(word, UNK_ID) for word in text.split()]

  def _decode_ids(self, ids):
    return ' '.join(self._words[i] for i in ids)

  @property
  def fingerprint(self) -> str:
    """The hash of the word list, in id order (see Vocabulary)."""
    return fingerprint_of('\n'.join(self._words).encode('utf-8'))


class SentencePieceVocabulary(Vocabulary):
  """A SentencePiece model (subwords), trained on the task's own text."""

  def __init__(self, model_path: str):
    if not os.path.exists(model_path):
      raise FileNotFoundError(f'SentencePiece model {model_path} not found.')
    self.model_path = model_path
    self._processor = spm.SentencePieceProcessor(model_file=model_path)
    ids = (self._processor.pad_id(), self._processor.eos_id(),
           self._processor.bos_id(), self._processor.unk_id())
    if ids != (PAD_ID, EOS_ID, BOS_ID, UNK_ID):
      raise ValueError(f'{model_path} has special ids (pad, eos, bos, unk) = '
                       f'{ids}; expected {(PAD_ID, EOS_ID, BOS_ID, UNK_ID)}.')

  @classmethod
  def train(cls, sentences: Iterable[str], model_path: str,
            vocab_size: int, **options) -> 'SentencePieceVocabulary':
    """Trains a unigram model on `sentences` and saves it at `model_path`.

    The model is trained in memory and written atomically
    (`atomic_files`): SentencePiece's own file writer ignores a failed
    write (past a file-size limit it left a truncated model and no error),
    and a job killed while writing leaves no half model.
    `options` are more SentencePiece trainer options (e.g. code's
    whitespace handling); they are stored in the model, so loading it
    needs none.

    Raises:
      errors.WriteError: the model could not be written.
    """
    if not model_path.endswith('.model'):
      raise ValueError(f'model_path {model_path!r} must end with ".model".')
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=model,
        vocab_size=vocab_size, model_type='unigram', character_coverage=1.0,
        pad_id=PAD_ID, eos_id=EOS_ID, bos_id=BOS_ID, unk_id=UNK_ID,
        hard_vocab_limit=False, minloglevel=2, **options)
    atomic_files.write_bytes(model_path, model.getvalue())
    return cls(model_path)

  @property
  def vocab_size(self) -> int:
    return self._processor.get_piece_size()

  @property
  def fingerprint(self) -> str:
    """The hash of the model (pieces, scores, normalisation; see
    Vocabulary): the same file trained again elsewhere differs."""
    return fingerprint_of(self._processor.serialized_model_proto())

  def encode(self, text: str) -> list[int]:
    return self._processor.encode(text)

  def encode_many(self, texts):
    return self._processor.encode(list(texts))

  def _decode_ids(self, ids):
    return self._processor.decode(ids)


def fingerprint_of(data: bytes) -> str:
  """A vocabulary's fingerprint: the first 16 hex digits of sha256."""
  return hashlib.sha256(data).hexdigest()[:16]


def sentencepiece_vocab(config, workdir: str, train_vocab: bool,
                        sentences: Callable[[], list[str]], **options):
  """The task's SentencePiece vocabulary: found, or trained and saved.

  task.vocab_path, when set, names an existing model (e.g. the vocabulary of
  the run that wrote a distilled corpus); otherwise WORKDIR/vocab.model is
  used, and trained on `sentences()` when missing and `train_vocab`. With
  several processes, process 0 trains it and the others wait for it (the
  workdir must be shared, as it is for checkpoints).

  Args:
    config: the `task` section: vocab_size, optional vocab_path.
    workdir: the run's directory.
    train_vocab: train a missing vocabulary (the training job); False: a
      missing one is an error (evaluation, distillation).
    sentences: () -> the text to train on, called only when training.
    **options: more trainer options (`SentencePieceVocabulary.train`).
  """
  model_path = config.get('vocab_path') or os.path.join(workdir,
                                                        'vocab.model')
  exists = os.path.exists(model_path)
  if not exists and (config.get('vocab_path') or not train_vocab):
    raise FileNotFoundError(
        f'vocabulary {model_path} not found: the training job writes it '
        f'(python -m bpd_jax.main --workdir=...); task.vocab_path names '
        f'another run\'s.')
  # Only here: the data modules need no devices otherwise.
  from bpd_jax.infra import distributed

  def train():
    text_ = sentences()
    logging.info('Training a %d-piece SentencePiece vocabulary on %d '
                 'sentences -> %s', config.vocab_size, len(text_), model_path)
    SentencePieceVocabulary.train(text_, model_path, config.vocab_size,
                                  **options)

  distributed.made_once(model_path, train, train_vocab, 'vocabulary')
  return SentencePieceVocabulary(model_path)
