"""Llama-family import: the tiny checkpoints of scripts/make_tiny_hf.py
(Llama 3, Llama 2, Mistral, Qwen2) compute what transformers recorded in
float32 and bfloat16; exact blockwise decoding on them equals greedy and
blockwise sampling keeps their distribution; every broken or unmodelled
checkpoint stops with one line naming what is wrong."""

import json
import os
import shutil

import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats
from flax import nnx
from safetensors import numpy as safetensors_numpy

from bpd_jax import generate
from bpd_jax.decoding import Sampler, Tree
from bpd_jax.infra import errors
from bpd_jax.models import RopeScaling
from bpd_jax.models import imports
from bpd_jax.models.imports import llama, reader

DATA = os.path.join(os.path.dirname(__file__), 'data')
FAMILIES = ('llama3', 'llama2', 'mistral', 'qwen2')
# make_tiny_hf.py's first bfloat16 greedy steps won by a clear margin.
BF16_CLEAR_STEPS = 4


def folder(family: str) -> str:
  return os.path.join(DATA, f'tiny_{family}')


def references(family: str) -> dict:
  with np.load(os.path.join(folder(family), 'references.npz')) as data:
    return dict(data)


def prompts(model, reference) -> np.ndarray:
  """[P, L] the reference prompts, right-padded with the model's pad_id."""
  prompt = reference['prompt']
  return np.where(prompt >= 0, prompt, model.config.pad_id).astype(np.int32)


@pytest.fixture(scope='module', params=FAMILIES)
def family(request):
  return request.param


@pytest.fixture(scope='module')
def float32_model(family):
  return imports.load_model(folder(family), dtype='float32',
                            param_dtype='float32')


def test_logits_equal_transformers_in_float32(family, float32_model):
  reference = references(family)
  for prompt, length, expected in zip(reference['prompt'],
                                      reference['prompt_length'],
                                      reference['logits']):
    hidden = float32_model(None, jnp.asarray(prompt[None, :length]))
    logits = np.asarray(float32_model.next_token_logits(hidden))[0]
    np.testing.assert_allclose(logits, expected[:length], rtol=0, atol=1e-4)


def test_greedy_equals_transformers_on_a_padded_batch(family, float32_model):
  """The prompts differ in length: each decodes at its own offsets."""
  reference = references(family)
  result = generate.Decoder(float32_model).greedy(
      prompts(float32_model, reference), max_len=reference['greedy'].shape[1])
  np.testing.assert_array_equal(np.asarray(result.tokens),
                                reference['greedy'])


def test_bfloat16_model_decodes_as_transformers_bfloat16():
  """Stored in bfloat16, the model computes in bfloat16 by default; its
  logits are transformers' within bfloat16's rounding, and the first
  greedy steps (won by a clear margin) are transformers'."""
  reference = references('llama3')
  model = imports.load_model(folder('llama3'))
  assert (model.config.dtype, model.config.param_dtype) == ('bfloat16',
                                                            'bfloat16')
  for prompt, length, expected in zip(reference['prompt'],
                                      reference['prompt_length'],
                                      reference['logits_bf16']):
    logits = model.next_token_logits(model(None, jnp.asarray(
        prompt[None, :length])))
    assert logits.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(logits)[0], expected[:length],
                               rtol=0, atol=0.15)
  result = generate.Decoder(model).greedy(prompts(model, reference),
                                          max_len=BF16_CLEAR_STEPS)
  np.testing.assert_array_equal(
      np.asarray(result.tokens)[:, :BF16_CLEAR_STEPS],
      reference['greedy_bf16'][:, :BF16_CLEAR_STEPS])


def test_configs_read_every_modelled_field():
  llama3 = imports.config_from(folder('llama3'), num_proposal_heads=3)
  assert (llama3.d_model, llama3.d_ff, llama3.num_decoder_layers) == (64, 128,
                                                                      2)
  assert (llama3.num_heads, llama3.num_kv_heads, llama3.head_dim) == (4, 2, 16)
  assert llama3.rope_scaling == RopeScaling('llama3', 4.0, 1.0, 4.0, 16)
  assert llama3.tie_output and llama3.max_target_len == 128
  assert (llama3.norm, llama3.feed_forward, llama3.activation) == (
      'rms', 'gated', 'silu')
  assert (llama3.bos_id, llama3.eos_id, llama3.stop_ids, llama3.pad_id) == (
      370, 371, (374, 375), -1)
  assert llama3.num_proposal_heads == 3 and llama3.num_encoder_layers == 0
  llama2 = imports.config_from(folder('llama2'))
  assert llama2.rope_scaling == RopeScaling('linear', 2.0)
  assert not llama2.tie_output and llama2.dtype == 'float32'
  assert (llama2.bos_id, llama2.eos_id, llama2.pad_id) == (1, 2, -1)
  mistral = imports.config_from(folder('mistral'))
  assert mistral.head_dim * mistral.num_heads != mistral.d_model
  qwen2 = imports.config_from(folder('qwen2'))
  assert (qwen2.qkv_bias, qwen2.out_bias, qwen2.ffn_bias) == (True, False,
                                                              False)
  # generation_config's ends, pad 377 one of them: nothing pads.
  assert (qwen2.eos_id, qwen2.stop_ids, qwen2.pad_id) == (379, (377,), -1)
  assert qwen2.vocab_size == 384  # The embedding's rows, not the tokenizer's.


def test_overrides_and_sliding_window(tmp_path):
  config = imports.config_from(folder('mistral'), max_target_len=40,
                               dtype='bfloat16')
  assert (config.max_target_len, config.dtype, config.param_dtype) == (
      40, 'bfloat16', 'float32')
  windowed = _copy(tmp_path, 'mistral', config={'sliding_window': 32})
  assert imports.config_from(windowed).max_target_len == 32
  with pytest.raises(errors.ConfigError, match='sliding_window=32'):
    imports.config_from(windowed, max_target_len=64)
  with pytest.raises(errors.ConfigError, match='max_position_embeddings=256'):
    imports.config_from(folder('mistral'), max_target_len=257)
  # Qwen2 keeps its window off unless use_sliding_window.
  unused = _copy(tmp_path / 'q', 'qwen2', config={'sliding_window': 8})
  assert imports.config_from(unused).max_target_len == 256


def test_every_base_tensor_is_read_and_heads_are_seeded():
  one = imports.load_model(folder('llama2'), num_proposal_heads=3)
  other = imports.load_model(folder('llama2'), num_proposal_heads=3, seed=1)
  base, other_base = _params(one, False), _params(other, False)
  assert base.keys() == other_base.keys()
  for path, value in base.items():
    np.testing.assert_array_equal(value, other_base[path], err_msg=str(path))
  heads, other_heads = _params(one, True), _params(other, True)
  assert any(not np.array_equal(heads[p], other_heads[p]) for p in heads)
  # Untied: the output is lm_head, not the embedding.
  checkpoint = reader.Checkpoint(folder('llama2'))
  np.testing.assert_array_equal(np.asarray(one.output.kernel[...]),
                                checkpoint.tensor('lm_head.weight').T)


@pytest.mark.parametrize('family_name,head_layer', [
    ('llama3', 'sequential'), ('qwen2', 'autoregressive'),
    pytest.param('llama2', 'independent', marks=pytest.mark.slow),
    pytest.param('mistral', 'joint', marks=pytest.mark.slow)])
def test_exact_blockwise_equals_greedy_on_imported_models(family_name,
                                                          head_layer):
  """Fresh heads on the frozen base: blockwise decoding and its trees give
  the base's greedy output, where prompts differ in length and the end
  tokens (eos_id and stop_ids) stop examples."""
  model = imports.load_model(folder(family_name), num_proposal_heads=4,
                             head_layer=head_layer, dtype='float32',
                             param_dtype='float32')
  batch = prompts(model, references(family_name))
  reference = generate.greedy(model, batch, max_len=20)
  for tree in (None, Tree.from_widths((2, 2), 3)):
    result = generate.blockwise(model, batch, k=4, max_len=20, tree=tree)
    np.testing.assert_array_equal(np.asarray(result.tokens)[:, :20],
                                  np.asarray(reference.tokens)[:, :20])
    np.testing.assert_array_equal(result.lengths, reference.lengths)


def test_prompt_lookup_on_an_imported_model_with_no_trained_heads():
  """Prompt lookup drafts for an imported checkpoint as it is, at a k
  beyond its (untrained) heads, alone and beside them: greedy's output."""
  model = imports.load_model(folder('llama3'), num_proposal_heads=2,
                             dtype='float32', param_dtype='float32')
  batch = prompts(model, references('llama3'))
  # A prompt that repeats itself, where lookup has something to find.
  words = batch[0][batch[0] != model.config.pad_id][:3]
  repeating = np.tile(words, -(-batch.shape[1] // len(words)))
  batch = np.concatenate([batch, repeating[None, :batch.shape[1]]], axis=0)
  decoder = generate.Decoder(model)
  reference = decoder.greedy(batch, max_len=20)
  for drafter, k in (('lookup:min=1', 6), ('lookup:heads=tree', 2)):
    result = decoder.blockwise(batch, k=k, max_len=20, drafter=drafter)
    np.testing.assert_array_equal(result.tokens, reference.tokens)
    np.testing.assert_array_equal(result.lengths, reference.lengths)


@pytest.mark.slow  # 25 s; tests/test_sampling.py's Llama-like case runs by default.
def test_blockwise_sampling_keeps_an_imported_models_distribution():
  """Two tokens sampled after a prompt (top 3 of each step, temperature
  0.7) by blockwise sampling with random heads: the chi-square test
  against the distribution computed from the model's full forward passes."""
  model = imports.load_model(folder('qwen2'), num_proposal_heads=3,
                             head_layer='sequential', dtype='float32',
                             param_dtype='float32')
  sampler = Sampler(0.7, top_k=3)
  prompt = references('qwen2')['prompt'][0]
  prompt = prompt[prompt >= 0]
  ends = {model.config.eos_id, *model.config.stop_ids}

  def step_probs(tokens):
    logits = model.next_token_logits(model(None, jnp.asarray([tokens])))
    return np.exp(np.asarray(sampler.log_probs(logits[:, -1]),
                             np.float64))[0]

  exact = {}
  first = step_probs(list(prompt))
  for t1 in np.flatnonzero(first > 0):
    if t1 in ends:
      exact[(t1,)] = first[t1]
      continue
    second = step_probs([*prompt, t1])
    for t2 in np.flatnonzero(second > 0):
      exact[(t1, t2)] = first[t1] * second[t2]
  samples = 20_000
  result = generate.blockwise(model, np.repeat(prompt[None], samples, 0), k=3,
                              max_len=2, sampler=sampler, key=0)
  tokens, lengths = np.asarray(result.tokens), np.asarray(result.lengths)
  outcomes = [tuple(int(t) for t in row[:n]) for row, n in zip(tokens,
                                                               lengths)]
  counts = {}
  for outcome in outcomes:
    counts[outcome] = counts.get(outcome, 0) + 1
  assert set(counts) <= set(exact)
  cells = [o for o in exact if exact[o] * samples >= 5]
  observed = [counts.get(o, 0) for o in cells]
  expected = [exact[o] * samples for o in cells]
  observed.append(samples - sum(observed))
  expected.append(samples - sum(expected))
  assert scipy.stats.chisquare(observed, expected).pvalue > 1e-4


@pytest.mark.parametrize('change,message', [
    (dict(config={'model_type': 'gemma'}),
     r"model_type 'gemma' is not imported; known: \['gpt2', 'llama'"),
    (dict(config={'hidden_act': 'gelu'}),
     r"has hidden_act='gelu'; the importer models only 'silu'"),
    (dict(config={'final_logit_softcapping': 30.0}),
     r'has final_logit_softcapping=30.0; the importer models only null\.$'),
    (dict(config={'rope_parameters': {'rope_type': 'yarn', 'factor': 4.0,
                                      'rope_theta': 1e4}}),
     r"has rope type 'yarn'; the importer models default, linear and "
     r'llama3'),
    (dict(config={'layer_types': ['full_attention', 'linear_attention']}),
     r"has layer_types with 'linear_attention'"),
    (dict(config={'num_key_value_heads': 3}),
     r'num_kv_heads=3 must be an integer >= 1 dividing num_heads=4'),
    (dict(config={'eos_token_id': None}, generation={'eos_token_id': None}),
     r'names no eos_token_id'),
    (dict(config={'bos_token_id': 999}, generation={'bos_token_id': 999}),
     r'bos_token_id=999: ids must be integers in \[0, vocab_size=376\)'),
    (dict(drop='model.layers.1.mlp.up_proj.weight'),
     r"has no tensor 'model.layers.1.mlp.up_proj.weight', which config.json "
     r'implies'),
    (dict(reshape='model.layers.0.self_attn.k_proj.weight'),
     r"tensor 'model.layers.0.self_attn.k_proj.weight' has shape \(16, 64\); "
     r'config.json implies \(32, 64\)'),
    (dict(add='model.layers.0.self_attn.q_norm.weight'),
     r"has 1 tensors the importer has no place for, e.g. "
     r"'model.layers.0.self_attn.q_norm.weight'"),
    (dict(add='lm_head.weight'),
     r'lm_head.weight differs from model.embed_tokens.weight, but '
     r'config.json ties them')])
def test_broken_or_unmodelled_checkpoints_are_one_line(tmp_path, change,
                                                       message):
  broken = _copy(tmp_path, 'llama3', **change)
  with pytest.raises((errors.ConfigError, errors.DataError)) as raised:
    imports.load_model(broken)
  text = str(raised.value)
  assert '\n' not in text
  assert __import__('re').search(message, text), text


def test_a_missing_folder_is_one_line(tmp_path):
  with pytest.raises(errors.MissingFileError, match='not found'):
    imports.load_model(str(tmp_path / 'none'))


def _params(model, heads: bool) -> dict:
  flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
  return {path: np.asarray(param[...]) for path, param in flat
          if (path[0] == 'heads') == heads}


def _copy(tmp_path, family_name, config=None, generation=None, drop=None,
          reshape=None, add=None) -> str:
  """A copy of a tiny checkpoint with config.json / generation_config.json
  fields changed and one tensor dropped, cut to half its rows, or added
  (the embedding negated for lm_head.weight, else the final norm's scales
  negated)."""
  target = str(tmp_path / family_name)
  shutil.copytree(folder(family_name), target)
  for name, fields in (('config.json', config),
                       ('generation_config.json', generation)):
    if fields:
      path = os.path.join(target, name)
      with open(path, encoding='utf-8') as f:
        values = json.load(f)
      values.update(fields)
      with open(path, 'w', encoding='utf-8') as f:
        json.dump(values, f)
  if drop or reshape or add:
    path = os.path.join(target, 'model.safetensors')
    tensors = safetensors_numpy.load_file(path)
    if drop:
      del tensors[drop]
    if reshape:
      tensors[reshape] = tensors[reshape][:tensors[reshape].shape[0] // 2]
    if add:
      like = tensors['model.embed_tokens.weight' if add == 'lm_head.weight'
                     else 'model.norm.weight']
      tensors[add] = -like  # Differs, with a weight's magnitudes.
    safetensors_numpy.save_file(tensors, path)
  return target
