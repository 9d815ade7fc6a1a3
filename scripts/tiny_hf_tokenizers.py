"""The tokenizers of scripts/make_tiny_hf.py's tiny checkpoints.

Each is trained here with `tokenizers` on TRAINING_TEXT and laid out as its
family's tokenizer.json is (pipeline, special tokens and their ids), with
the tokenizer_config.json fields the family's folders carry.
"""

import dataclasses
import json

import tokenizers
from tokenizers import decoders
from tokenizers import models as tokenizer_models
from tokenizers import normalizers
from tokenizers import pre_tokenizers
from tokenizers import processors
from tokenizers import trainers

TRAINING_TEXT = [
    'Blockwise parallel decoding proposes several tokens at once.',
    'The base model checks every proposal in a single call.',
    'A proposal is kept while it matches what greedy decoding would say.',
    'Small models run fast; large models run well.',
    "It's a café in Zürich, isn't it? Naïve résumés cost 5 € each.",
    'def greet(name):\n    return f"hello, {name}!"\n',
    'Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000, and 3.14159.',
] * 4
# Llama 3's and Qwen2's pre-tokenizing patterns (from their tokenizer.json):
# they differ in how digits group (up to 3 / one by one).
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
                  r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
                  r"\s+(?!\S)|\s+")
QWEN2_PATTERN = LLAMA3_PATTERN.replace(r'\p{N}{1,3}', r'\p{N}')


@dataclasses.dataclass(frozen=True)
class TokenizerFiles:
  """A trained tokenizer and what the folder's files say of it.

  Attributes:
    tokenizer: the `tokenizers` pipeline (tokenizer.json).
    ids: special token -> id.
    tokenizer_config: tokenizer_config.json.
  """
  tokenizer: tokenizers.Tokenizer
  ids: dict[str, int]
  tokenizer_config: dict


def byte_level_tokenizer(pattern: str, specials: list[str], vocab_size: int,
                         nfc: bool) -> tokenizers.Tokenizer:
  """A byte-level BPE as Llama 3's and Qwen2's: regex split, then bytes;
  the special tokens added after the trained ones (their ids last)."""
  tokenizer = tokenizers.Tokenizer(tokenizer_models.BPE())
  if nfc:
    tokenizer.normalizer = normalizers.NFC()
  tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
      pre_tokenizers.Split(tokenizers.Regex(pattern), behavior='isolated'),
      pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
  tokenizer.decoder = decoders.ByteLevel()
  tokenizer.train_from_iterator(TRAINING_TEXT, trainers.BpeTrainer(
      vocab_size=vocab_size, min_frequency=2, show_progress=False,
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
  tokenizer.add_special_tokens(specials)
  return tokenizer


def llama3_tokenizer() -> TokenizerFiles:
  """Llama 3.2 Instruct's layout: <|begin_of_text|> prepended, three ids
  that end a turn, no pad."""
  specials = ['<|begin_of_text|>', '<|end_of_text|>', '<|start_header_id|>',
              '<|end_header_id|>', '<|eom_id|>', '<|eot_id|>']
  tokenizer = byte_level_tokenizer(LLAMA3_PATTERN, specials, 370, nfc=False)
  ids = {s: tokenizer.token_to_id(s) for s in specials}
  bos = '<|begin_of_text|>'
  tokenizer.post_processor = processors.Sequence([
      processors.ByteLevel(trim_offsets=False),
      processors.TemplateProcessing(
          single=f'{bos} $A', pair=f'{bos} $A {bos} $B',
          special_tokens=[(bos, ids[bos])])])
  return TokenizerFiles(tokenizer, ids, {
      'bos_token': bos, 'eos_token': '<|eot_id|>', 'clean_up_tokenization_'
      'spaces': True, 'model_max_length': 131072,
      'tokenizer_class': 'PreTrainedTokenizerFast'})


def qwen2_tokenizer() -> TokenizerFiles:
  """Qwen2 Instruct's layout: nothing prepended, <|im_end|> ends a turn,
  <|endoftext|> pads."""
  specials = ['<|endoftext|>', '<|im_start|>', '<|im_end|>']
  tokenizer = byte_level_tokenizer(QWEN2_PATTERN, specials, 377, nfc=True)
  tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
  return TokenizerFiles(tokenizer, {s: tokenizer.token_to_id(s)
                                    for s in specials}, {
      'bos_token': None, 'eos_token': '<|im_end|>',
      'pad_token': '<|endoftext|>', 'errors': 'replace',
      'split_special_tokens': False, 'model_max_length': 131072,
      'tokenizer_class': 'Qwen2Tokenizer'})


def sentencepiece_tokenizer(pad_token: str | None) -> TokenizerFiles:
  """Llama 2's SentencePiece model as transformers converts it: <unk> 0,
  <s> 1, </s> 2, the 256 byte tokens <0x00>..<0xFF> (a character without
  a piece is its UTF-8 bytes), then the pieces, '▁' marking a space."""
  trainer = tokenizers.Tokenizer(tokenizer_models.BPE())
  # Split at spaces to train (no piece spans two words, as SentencePiece);
  # the saved pipeline does not split, as transformers' LlamaTokenizer.
  trainer.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme='first')
  trainer.train_from_iterator(TRAINING_TEXT, trainers.BpeTrainer(
      vocab_size=120, min_frequency=2, show_progress=False))
  trained = json.loads(trainer.to_str())['model']
  specials = ['<unk>', '<s>', '</s>']
  vocab = {token: i for i, token in enumerate(
      specials + [f'<0x{b:02X}>' for b in range(256)])}
  for token, _ in sorted(trained['vocab'].items(), key=lambda item: item[1]):
    vocab.setdefault(token, len(vocab))
  tokenizer = tokenizers.Tokenizer(tokenizer_models.BPE(
      vocab=vocab, merges=[tuple(pair) for pair in trained['merges']],
      unk_token='<unk>', byte_fallback=True, fuse_unk=True))
  tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(
      prepend_scheme='first', split=False)
  tokenizer.decoder = decoders.Sequence([
      decoders.Replace('▁', ' '), decoders.ByteFallback(), decoders.Fuse(),
      decoders.Strip(' ', 1, 0)])
  tokenizer.add_special_tokens(specials)
  tokenizer.post_processor = processors.TemplateProcessing(
      single='<s> $A', pair='<s> $A <s> $B', special_tokens=[('<s>', 1)])

  def added(content):  # How Llama 2's tokenizer_config.json names them.
    return {'__type': 'AddedToken', 'content': content, 'lstrip': False,
            'normalized': False, 'rstrip': False, 'single_word': False}

  return TokenizerFiles(tokenizer, {s: vocab[s] for s in specials}, {
      'add_bos_token': True, 'add_eos_token': False, 'legacy': False,
      'bos_token': added('<s>'), 'eos_token': added('</s>'),
      'unk_token': added('<unk>'), 'pad_token': pad_token,
      'clean_up_tokenization_spaces': False, 'model_max_length': 2048,
      'tokenizer_class': 'LlamaTokenizer'})

