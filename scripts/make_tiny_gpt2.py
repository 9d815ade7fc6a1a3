"""Writes the tiny random GPT-2 the importer's tests read (tests/data/).

    pip install -r requirements.txt -r requirements-bench.txt
    python scripts/make_tiny_gpt2.py  # --output_dir=tests/data/tiny_gpt2

requirements-bench.txt brings torch (CPU) and transformers, which only this
script needs: the tests read the files it writes, committed, and CI
installs neither.

What it writes, as Hugging Face lays out a downloaded GPT-2:
- vocab.json, merges.txt: a byte-level BPE of VOCAB_SIZE tokens trained
  with `tokenizers` on TRAINING_TEXT, renumbered so that <|endoftext|> is
  the last id, as in GPT-2's own vocabulary.
- tokenizer.json: the same tokenizer as transformers' GPT2TokenizerFast
  saves it from vocab.json and merges.txt (the file the Hub's gpt2
  repository holds, which tasks/text/hf_vocab.py reads).
- config.json, model.safetensors: `GPT2LMHeadModel.save_pretrained` of a
  2-layer model of width 32 (tensors named `transformer.h.0...`, the tied
  lm_head left out). Every parameter is drawn at random, layer-norm scales
  and all biases included, and larger than GPT-2's initialisation, so that
  a parameter mapped to the wrong place shows in the logits.
- expected_logits.npz, all from transformers in float32:
    input_ids [2, 16] GPT-2 ids (row 0 starts with <|endoftext|>) and
    logits [2, 16, VOCAB_SIZE] of GPT2LMHeadModel on them;
    text (a string) and text_ids, what GPT2Tokenizer gives for it;
    prompt [P] and greedy [GREEDY_STEPS]: the greedy continuation of
    the prompt, each step's winner ahead of the runner-up by more than
    MIN_MARGIN (so that float rounding cannot flip it) and none of them
    <|endoftext|>.

Seeded: a rerun writes the same files (up to the library versions).
"""

import json
import os
import tempfile

from absl import app
from absl import flags
import numpy as np
import tokenizers
import torch
import transformers

_OUTPUT_DIR = flags.DEFINE_string(
    'output_dir', os.path.normpath(os.path.join(
        os.path.dirname(__file__), os.pardir, 'tests', 'data', 'tiny_gpt2')),
    'Where to write the checkpoint.')

ENDOFTEXT = '<|endoftext|>'
VOCAB_SIZE = 384
GREEDY_STEPS = 12
MIN_MARGIN = 1e-3
SEED = 0
TRAINING_TEXT = [
    'Blockwise parallel decoding proposes several tokens at once.',
    'The base model checks every proposal in a single call.',
    'A proposal is kept while it matches what greedy decoding would say.',
    'Small models run fast; large models run well.',
    "It's a café in Zürich, isn't it? Naïve résumés cost 5 € each.",
    'def greet(name):\n    return f"hello, {name}!"\n',
    'Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000, and 3.14159.',
] * 4
TEXT = "Blockwise decoding isn't greedy, yet it's exact: café 42!"


def write_tokenizer(directory: str) -> dict[str, int]:
  """Trains the BPE and writes vocab.json and merges.txt; the vocabulary."""
  bpe = tokenizers.ByteLevelBPETokenizer()
  bpe.train_from_iterator(TRAINING_TEXT, vocab_size=VOCAB_SIZE,
                          min_frequency=2, show_progress=False,
                          special_tokens=[ENDOFTEXT])
  bpe.save_model(directory)  # vocab.json and merges.txt.
  # The trainer puts special tokens first; GPT-2 has <|endoftext|> last.
  # BPE merges name tokens, not ids, so renumbering keeps merges.txt valid.
  tokens = sorted(bpe.get_vocab().items(), key=lambda item: item[1])
  order = [t for t, _ in tokens if t != ENDOFTEXT] + [ENDOFTEXT]
  vocab = {token: i for i, token in enumerate(order)}
  with open(os.path.join(directory, 'vocab.json'), 'w',
            encoding='utf-8') as f:
    json.dump(vocab, f, ensure_ascii=False)
  return vocab


def write_tokenizer_json(directory: str) -> None:
  """tokenizer.json of DIRECTORY's vocab.json and merges.txt, as
  GPT2TokenizerFast saves it (its other files are not read here)."""
  fast = transformers.GPT2TokenizerFast(
      vocab=os.path.join(directory, 'vocab.json'),
      merges=os.path.join(directory, 'merges.txt'))
  with tempfile.TemporaryDirectory() as saved:
    fast.save_pretrained(saved)
    os.replace(os.path.join(saved, 'tokenizer.json'),
               os.path.join(directory, 'tokenizer.json'))


def random_model(vocab_size: int, endoftext: int):
  """A seeded GPT2LMHeadModel with every parameter drawn at random."""
  config = transformers.GPT2Config(
      vocab_size=vocab_size, n_positions=64, n_embd=32, n_layer=2, n_head=4,
      bos_token_id=endoftext, eos_token_id=endoftext)
  torch.manual_seed(SEED)
  model = transformers.GPT2LMHeadModel(config).eval()
  with torch.no_grad():
    for name, param in model.named_parameters():  # wte once (tied).
      if name.endswith(('ln_1.weight', 'ln_2.weight', 'ln_f.weight')):
        param.copy_(1.0 + 0.2 * torch.randn_like(param))
      elif name.endswith('bias'):
        param.copy_(0.1 * torch.randn_like(param))
      else:
        param.copy_(0.2 * torch.randn_like(param))
  return model


def greedy(model, prompt: list[int], endoftext: int) -> list[int]:
  """GREEDY_STEPS tokens after `prompt`, each won by > MIN_MARGIN, none of
  them <|endoftext|> (decoding would stop there)."""
  tokens = list(prompt)
  for _ in range(GREEDY_STEPS):
    with torch.no_grad():
      logits = model(torch.tensor([tokens])).logits[0, -1]
    top = torch.topk(logits, 2)
    if top.values[0] - top.values[1] <= MIN_MARGIN or (
        top.indices[0] == endoftext):
      raise RuntimeError(f'greedy step {len(tokens) - len(prompt)} is a near '
                         f'tie or <|endoftext|> ({top}): change SEED or the '
                         f'prompt.')
    tokens.append(int(top.indices[0]))
  return tokens[len(prompt):]


def main(argv):
  del argv
  directory = _OUTPUT_DIR.value
  os.makedirs(directory, exist_ok=True)
  vocab = write_tokenizer(directory)
  write_tokenizer_json(directory)
  endoftext = vocab[ENDOFTEXT]
  model = random_model(len(vocab), endoftext)
  with tempfile.TemporaryDirectory() as saved:
    # save_pretrained also writes generation_config.json, which the
    # importer does not read: only the two files it reads are kept.
    model.save_pretrained(saved)
    for name in ('config.json', 'model.safetensors'):
      os.replace(os.path.join(saved, name), os.path.join(directory, name))

  tokenizer = transformers.GPT2Tokenizer(
      vocab=os.path.join(directory, 'vocab.json'),
      merges=os.path.join(directory, 'merges.txt'))
  text_ids = tokenizer.encode(TEXT)
  assert endoftext not in text_ids, text_ids
  rng = np.random.default_rng(SEED)
  input_ids = rng.integers(0, endoftext, (2, 16))
  input_ids[0, 0] = endoftext  # How GPT-2 starts a text.
  with torch.no_grad():
    logits = model(torch.tensor(input_ids)).logits.numpy()
  prompt = [endoftext] + text_ids[:6]
  np.savez(os.path.join(directory, 'expected_logits.npz'),
           input_ids=input_ids.astype(np.int32),
           logits=logits.astype(np.float32), text=np.array(TEXT),
           text_ids=np.array(text_ids, np.int32),
           prompt=np.array(prompt, np.int32),
           greedy=np.array(greedy(model, prompt, endoftext), np.int32))
  print(f'wrote {sorted(os.listdir(directory))} to {directory}')


if __name__ == '__main__':
  app.run(main)
