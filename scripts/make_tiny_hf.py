"""Writes the tiny random Llama-family checkpoints the importers' tests read.

    pip install -r requirements.txt -r requirements-bench.txt
    python scripts/make_tiny_hf.py  # --output_dir=tests/data

The committed folders were written by this script with torch 2.13.0+cpu,
transformers 5.25.0 and tokenizers 0.23.3 (Python 3.11, CPU). The tests read
the files, committed; CI installs neither torch nor transformers.

Each folder is what `save_pretrained` writes or the Hub serves, for a model
of width 64 or less, 2 layers and a few hundred tokens, with every
parameter drawn at random (norm scales around 1, biases included) and
larger than the families' initialisation, so that a parameter mapped to
the wrong place shows in the logits:

  folder        class               features
  tiny_llama3   LlamaForCausalLM    GQA 4/2 heads, head_dim 16 given,
                                    rope 'llama3' scaling (original length
                                    16: every frequency scaled or blended
                                    at the prompts' positions), tied
                                    output, stored in bfloat16; Llama 3's
                                    byte-level BPE (bos, eos list, no pad)
  tiny_llama2   LlamaForCausalLM    MQA (1 KV head), rope 'linear' scaling,
                                    untied, float32, 4 shards with
                                    model.safetensors.index.json; Llama 2 /
                                    TinyLlama's SentencePiece-style BPE
                                    (Metaspace, byte fallback; unk 0, bos 1,
                                    eos 2, pad </s> in tokenizer_config)
  tiny_mistral  MistralForCausalLM  GQA 4/2, head_dim 16 where width / heads
                                    is 8 (as in Mistral NeMo), no sliding
                                    window, untied; the SentencePiece-style
                                    tokenizer (no pad)
  tiny_qwen2    Qwen2ForCausalLM    GQA 4/2, q/k/v biases, tied, rope_theta
                                    1e6, embedding rows past the tokenizer's
                                    ids (as Qwen2's 151936 rows for 151665
                                    tokens); Qwen2's byte-level BPE (no bos
                                    prepended, eos list, pad <|endoftext|>)

config.json: tiny_llama3 and tiny_mistral as transformers 5 writes it
(rope_parameters, dtype); tiny_llama2 and tiny_qwen2 rewritten as the
Hub's checkpoints, saved by transformers 4, have it (rope_theta and
rope_scaling, torch_dtype), which transformers 5 still reads: an importer
meets both. Each folder also holds generation_config.json, tokenizer.json
(trained here with `tokenizers`, scripts/tiny_hf_tokenizers.py) and
tokenizer_config.json (the family's tokenizer_class and special tokens).

references.npz, computed by transformers from the folder as written
(`from_pretrained`), per prompt p of P (token ids, as the family's
tokenizer encodes PROMPT_TEXTS[p] with its special tokens):
  seed               the model's torch seed (the first from SEED whose
                     greedy steps below are clear)
  prompt [P, L]      ids, padded with -1; prompt_length [P]
  logits [P, L, V]   float32 logits of the model loaded in float32 (0 past
                     prompt_length; V the config's vocab_size)
  greedy [P, 12]     generate(do_sample=False, max_new_tokens=12) in
                     float32 (the folder's sampling settings off); every
                     step won by more than MIN_MARGIN and none an eos, so
                     that no decoding stops early
  margin [P, 12]     each greedy step's winning logit over the runner-up's
  weights_sha256     sha256 of each tensor's stored bytes, in names order
                     (names [N]): a reader must give back these bytes
  tokenizer_text [T], tokenizer_ids [T, M] (-1 padded), and
  tokenizer_ids_special [T, M]: AutoTokenizer's ids of TOKENIZER_TEXTS
                     without and with the special tokens it adds
and for tiny_llama3 (bfloat16) also logits_bf16, greedy_bf16 and
margin_bf16 of the model loaded in bfloat16 (float32 of its logits): the
first BF16_CLEAR_STEPS steps of each prompt are won by more than
BF16_MIN_MARGIN; later ones may be near ties, which another bfloat16
implementation may break the other way (margin_bf16 says which).

Seeded: a rerun writes the same files (up to the library versions).
"""

import copy
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from typing import Callable

from absl import app
from absl import flags
import numpy as np
from safetensors import torch as safetensors_torch
import torch
import transformers

from tiny_hf_tokenizers import llama3_tokenizer
from tiny_hf_tokenizers import qwen2_tokenizer
from tiny_hf_tokenizers import sentencepiece_tokenizer
from tiny_hf_tokenizers import TokenizerFiles

_OUTPUT_DIR = flags.DEFINE_string(
    'output_dir', os.path.normpath(os.path.join(
        os.path.dirname(__file__), os.pardir, 'tests', 'data')),
    'Where to write the tiny_* folders.')

SEED = 0
MAX_SEEDS = 200
GREEDY_STEPS = 12
MIN_MARGIN = 1e-3
# bfloat16 logits differ between implementations by a unit or two in their
# last place (1/64 for logits in [2, 4)): the first BF16_CLEAR_STEPS steps
# of each bfloat16 greedy run are won by more than BF16_MIN_MARGIN.
BF16_CLEAR_STEPS = 6
BF16_MIN_MARGIN = 0.0625
PROMPT_TEXTS = ['Small', 'The base model checks',
                "It's a café in Zürich, isn't it?"]
TOKENIZER_TEXTS = [
    "Blockwise decoding isn't greedy, yet it's exact: café 42!",
    '  two  spaces,\ttabs\nand\n\nnewlines ',
    '日本語 and 🙂 are bytes here',
    'def f(x):\n    return x * 1000',
]


@dataclasses.dataclass(frozen=True)
class Folder:
  """One checkpoint to write.

  Attributes:
    model_class: the transformers class.
    config: its config's fields (the special ids are added from the
      tokenizer by `special_ids`).
    tokenizer: () -> the folder's tokenizer files.
    special_ids: (tokenizer ids) -> config.json's and
      generation_config.json's bos/eos/pad fields.
    generation: more generation_config.json fields.
    dtype: the stored dtype (torch_dtype).
    max_shard_size: bytes per shard (None: one model.safetensors).
    hub_layout: rewrite config.json as transformers 4 wrote it.
    rows_multiple: the embedding's rows are the tokenizer's ids rounded
      up to a multiple of this (Qwen2's 151936 rows for 151665 ids are
      1187 * 128).
  """
  model_class: type
  config: dict
  tokenizer: Callable[[], TokenizerFiles]
  special_ids: Callable[[dict[str, int]], tuple[dict, dict]]
  generation: dict = dataclasses.field(default_factory=dict)
  dtype: torch.dtype = torch.float32
  max_shard_size: int | None = None
  hub_layout: bool = False
  rows_multiple: int = 1


def _llama3_ids(ids):
  ends = [ids['<|end_of_text|>'], ids['<|eom_id|>'], ids['<|eot_id|>']]
  return ({'bos_token_id': ids['<|begin_of_text|>'], 'eos_token_id': ends},
          {'bos_token_id': ids['<|begin_of_text|>'], 'eos_token_id': ends})


def _sentencepiece_ids(ids):
  del ids  # Fixed by the layout.
  return ({'bos_token_id': 1, 'eos_token_id': 2},
          {'bos_token_id': 1, 'eos_token_id': 2})


def _qwen2_ids(ids):
  text, end = ids['<|endoftext|>'], ids['<|im_end|>']
  return ({'bos_token_id': text, 'eos_token_id': end},
          {'bos_token_id': text, 'eos_token_id': [end, text],
           'pad_token_id': text})


FOLDERS = {
    'tiny_llama3': Folder(
        transformers.LlamaForCausalLM,
        dict(hidden_size=64, intermediate_size=128, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5,
             max_position_embeddings=128, tie_word_embeddings=True,
             rope_parameters={'rope_type': 'llama3', 'rope_theta': 10000.0,
                              'factor': 4.0, 'low_freq_factor': 1.0,
                              'high_freq_factor': 4.0,
                              'original_max_position_embeddings': 16}),
        llama3_tokenizer, _llama3_ids,
        generation=dict(do_sample=True, temperature=0.6, top_p=0.9),
        dtype=torch.bfloat16),
    'tiny_llama2': Folder(
        transformers.LlamaForCausalLM,
        dict(hidden_size=32, intermediate_size=64, num_attention_heads=4,
             num_key_value_heads=1, rms_norm_eps=1e-5,
             max_position_embeddings=64, tie_word_embeddings=False,
             rope_parameters={'rope_type': 'linear', 'rope_theta': 10000.0,
                              'factor': 2.0}),
        lambda: sentencepiece_tokenizer(pad_token='</s>'),
        _sentencepiece_ids, generation=dict(max_length=64),
        max_shard_size=50_000, hub_layout=True),
    'tiny_mistral': Folder(
        transformers.MistralForCausalLM,
        dict(hidden_size=32, intermediate_size=64, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5,
             max_position_embeddings=256, sliding_window=None,
             tie_word_embeddings=False,
             rope_parameters={'rope_type': 'default',
                              'rope_theta': 1000000.0}),
        lambda: sentencepiece_tokenizer(pad_token=None), _sentencepiece_ids),
    'tiny_qwen2': Folder(
        transformers.Qwen2ForCausalLM,
        dict(hidden_size=32, intermediate_size=64, num_attention_heads=4,
             num_key_value_heads=2, rms_norm_eps=1e-6,
             max_position_embeddings=256, tie_word_embeddings=True,
             rope_parameters={'rope_type': 'default',
                              'rope_theta': 1000000.0}),
        qwen2_tokenizer, _qwen2_ids,
        generation=dict(do_sample=True, temperature=0.7, top_p=0.8,
                        top_k=20, repetition_penalty=1.05),
        hub_layout=True, rows_multiple=128),
}


def random_model(folder: Folder, config, seed: int):
  """A seeded float32 model with every parameter drawn at random and
  rounded to folder.dtype (so that it computes what the stored weights
  loaded in float32 compute)."""
  torch.manual_seed(seed)
  model = folder.model_class(config).eval()
  with torch.no_grad():
    for name, param in model.named_parameters():  # Tied ones once.
      if name.endswith('norm.weight'):
        param.copy_(1.0 + 0.2 * torch.randn_like(param))
      elif name.endswith('bias'):
        param.copy_(0.2 * torch.randn_like(param))
      else:
        param.copy_(0.15 * torch.randn_like(param))
      param.copy_(param.to(folder.dtype))
  return model


def to_hub_layout(path: str):
  """config.json as transformers 4 wrote it: rope_theta and rope_scaling
  (null, or {'type': ..., ...} without rope_theta), torch_dtype, no
  head_dim where it is hidden_size / num_attention_heads."""
  with open(path, encoding='utf-8') as f:
    config = json.load(f)
  rope = dict(config.pop('rope_parameters'))
  config['rope_theta'] = rope.pop('rope_theta')
  rope_type = rope.pop('rope_type')
  config['rope_scaling'] = (None if rope_type == 'default'
                            else {'type': rope_type, **rope})
  config['torch_dtype'] = config.pop('dtype')
  if config.get('head_dim', 0) * config['num_attention_heads'] == (
      config['hidden_size']):
    del config['head_dim']  # Written only where it differs, then.
  config.pop('layer_types', None)  # transformers 5's, derived from the rest.
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(config, f, indent=2, sort_keys=True)
    f.write('\n')


def write_folder(folder: Folder, tokenizer: TokenizerFiles, seed: int,
                 directory: str):
  """Writes the model, its config files and the tokenizer files."""
  config_ids, generation_ids = folder.special_ids(tokenizer.ids)
  vocab_size = -(-tokenizer.tokenizer.get_vocab_size()
                 // folder.rows_multiple) * folder.rows_multiple
  config = folder.model_class.config_class(
      vocab_size=vocab_size, num_hidden_layers=2, pad_token_id=None,
      **config_ids, **folder.config)
  model = random_model(folder, config, seed)
  model.generation_config = transformers.GenerationConfig(
      **generation_ids, **folder.generation)
  copy.deepcopy(model).to(folder.dtype).save_pretrained(directory, **(
      {'max_shard_size': folder.max_shard_size} if folder.max_shard_size
      else {}))
  if folder.hub_layout:
    to_hub_layout(os.path.join(directory, 'config.json'))
  tokenizer.tokenizer.save(os.path.join(directory, 'tokenizer.json'))
  with open(os.path.join(directory, 'tokenizer_config.json'), 'w',
            encoding='utf-8') as f:
    json.dump(tokenizer.tokenizer_config, f, indent=2, ensure_ascii=False)
    f.write('\n')
  return model


def forward(model, prompt: list[int]) -> np.ndarray:
  """[len(prompt), V] float32 logits."""
  with torch.no_grad():
    return model(torch.tensor([prompt])).logits[0].float().numpy()


def greedy(model, prompt: list[int], ends: set[int], clear_steps: int,
           margin: float) -> tuple[list[int], np.ndarray] | None:
  """generate()'s greedy continuation and each step's margin (the winner's
  logit over the runner-up's, in a full forward pass); None where decoding
  stops early (an eos) or one of the first `clear_steps` steps is won by
  `margin` or less or differs from the full pass's winner."""
  # Greedy alone: the folder's sampling and repetition_penalty are off.
  settings = transformers.GenerationConfig(
      do_sample=False, max_new_tokens=GREEDY_STEPS, eos_token_id=sorted(ends),
      pad_token_id=min(ends))
  with torch.no_grad():
    out = model.generate(torch.tensor([prompt]),
                         generation_config=settings)[0].tolist()
  new = out[len(prompt):]
  if len(new) != GREEDY_STEPS or ends & set(new):
    return None
  logits = forward(model, out[:-1])[len(prompt) - 1:]
  top = np.sort(logits, axis=-1)
  margins = top[:, -1] - top[:, -2]
  winners = np.argmax(logits, axis=-1)
  if (np.any(margins[:clear_steps] <= margin)
      or np.any(winners[:clear_steps] != new[:clear_steps])):
    return None
  return new, margins


def references(directory: str, folder: Folder, model, seed: int) -> dict | None:
  """What references.npz holds, computed from the folder as written;
  None where a greedy step is not clear (the caller tries another seed)."""
  auto = transformers.AutoTokenizer.from_pretrained(directory)
  prompts = [auto(text).input_ids for text in PROMPT_TEXTS]
  ends = set(np.ravel(model.generation_config.eos_token_id).tolist())
  loaded = {}
  for dtype in ([torch.float32, torch.bfloat16]
                if folder.dtype == torch.bfloat16 else [torch.float32]):
    loaded[dtype] = transformers.AutoModelForCausalLM.from_pretrained(
        directory, dtype=dtype).eval()
  f32 = loaded[torch.float32]
  # The files hold the model drawn (config.json rewritten or not): the
  # same logits as the one in memory.
  for prompt in prompts:
    np.testing.assert_array_equal(forward(f32, prompt),
                                  forward(model, prompt))
  result = {'seed': np.int64(seed)}
  for suffix, dtype, clear_steps, margin in (
      ('', torch.float32, GREEDY_STEPS, MIN_MARGIN),
      ('_bf16', torch.bfloat16, BF16_CLEAR_STEPS, BF16_MIN_MARGIN)):
    if dtype not in loaded:
      continue
    runs = [greedy(loaded[dtype], prompt, ends, clear_steps, margin)
            for prompt in prompts]
    if None in runs:
      return None
    result['greedy' + suffix] = np.array([new for new, _ in runs], np.int32)
    result['margin' + suffix] = np.array([m for _, m in runs], np.float32)
    result['logits' + suffix] = padded(
        [forward(loaded[dtype], prompt) for prompt in prompts], 0)
  result['prompt'] = padded(prompts, -1)
  result['prompt_length'] = np.array([len(p) for p in prompts], np.int32)
  result.update(tensor_checksums(directory))
  result['tokenizer_text'] = np.array(TOKENIZER_TEXTS)
  result['tokenizer_ids'] = padded(
      [auto(text, add_special_tokens=False).input_ids
       for text in TOKENIZER_TEXTS], -1)
  result['tokenizer_ids_special'] = padded(
      [auto(text).input_ids for text in TOKENIZER_TEXTS], -1)
  return result


def tensor_checksums(directory: str) -> dict:
  """names [N] and weights_sha256 [N]: each stored tensor's bytes, hashed,
  read back with safetensors' torch loader (what transformers reads)."""
  names, digests = [], []
  for name in sorted(os.listdir(directory)):
    if name.endswith('.safetensors'):
      for key, value in sorted(safetensors_torch.load_file(
          os.path.join(directory, name)).items()):
        names.append(key)
        raw = value.contiguous().reshape(-1).view(torch.uint8)
        digests.append(hashlib.sha256(raw.numpy().tobytes()).hexdigest())
  return {'names': np.array(names), 'weights_sha256': np.array(digests)}


def padded(rows: list, fill) -> np.ndarray:
  """[len(rows), max length, ...] of the rows, `fill` past each one's end."""
  rows = [np.asarray(row) for row in rows]
  width = max(len(row) for row in rows)
  dtype = np.float32 if rows[0].dtype.kind == 'f' else np.int32
  out = np.full((len(rows), width) + rows[0].shape[1:], fill, dtype)
  for i, row in enumerate(rows):
    out[i, :len(row)] = row
  return out


def write(name: str, folder: Folder, output_dir: str):
  tokenizer = folder.tokenizer()
  for seed in range(SEED, SEED + MAX_SEEDS):
    with tempfile.TemporaryDirectory() as directory:
      model = write_folder(folder, tokenizer, seed, directory)
      result = references(directory, folder, model, seed)
      if result is None:
        continue
      np.savez_compressed(os.path.join(directory, 'references.npz'),
                          **result)
      target = os.path.join(output_dir, name)
      shutil.rmtree(target, ignore_errors=True)
      shutil.copytree(directory, target)
      sizes = {f: os.path.getsize(os.path.join(target, f))
               for f in sorted(os.listdir(target))}
      print(f'{target}: seed {seed}, {sum(sizes.values())} bytes {sizes}')
      return
  raise RuntimeError(f'{name}: no seed in [{SEED}, {SEED + MAX_SEEDS}) '
                     f'gives clear greedy steps.')


def main(argv):
  del argv
  transformers.utils.logging.disable_progress_bar()
  for name, folder in FOLDERS.items():
    write(name, folder, _OUTPUT_DIR.value)


if __name__ == '__main__':
  app.run(main)
