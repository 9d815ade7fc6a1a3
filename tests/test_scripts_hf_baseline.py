"""scripts/hf_baseline.py: its torch-free parts, and its HF side where
torch exists.

CI installs no torch: the mapping to Marian's fields, the eos suppression
and the ratios and table are tested without it; the tests that build the
HF model skip unless torch and transformers are installed.
"""

import types

import numpy as np
import pytest

from bpd_jax import generate
from bpd_jax.models import TransformerConfig

from train_configs import load_script

hf_baseline = load_script('hf_baseline')

NEW_TOKENS = 12


def tiny_config(**overrides):
  return TransformerConfig.from_size(
      'tiny', **{**dict(vocab_size=50, num_proposal_heads=1, dropout_rate=0.0,
                        max_target_len=NEW_TOKENS + 1, max_source_len=8),
                 **overrides})


def test_marian_kwargs_match_our_dimensions():
  config = tiny_config()
  kwargs = hf_baseline.marian_kwargs(config)
  expected = dict(
      vocab_size=50, decoder_vocab_size=50, d_model=32, encoder_layers=2,
      decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
      encoder_ffn_dim=64, decoder_ffn_dim=64, activation_function='relu',
      scale_embedding=True, share_encoder_decoder_embeddings=True,
      tie_word_embeddings=True, pad_token_id=config.pad_id,
      eos_token_id=config.eos_id, decoder_start_token_id=config.bos_id,
      forced_eos_token_id=None)
  assert {key: kwargs[key] for key in expected} == expected
  assert kwargs['max_position_embeddings'] >= NEW_TOKENS + 1


def test_marian_kwargs_of_the_benchmark_sizes():
  for size, (d_model, d_ff, heads, layers) in dict(
      small=(256, 1024, 4, 3), base=(512, 2048, 8, 6)).items():
    kwargs = hf_baseline.marian_kwargs(hf_baseline.ours_config(size, 64))
    assert (kwargs['d_model'], kwargs['encoder_ffn_dim'],
            kwargs['decoder_attention_heads'], kwargs['encoder_layers'],
            kwargs['decoder_layers']) == (d_model, d_ff, heads, layers,
                                          layers)
    assert kwargs['vocab_size'] == hf_baseline.VOCAB_SIZES[size]


def test_marian_kwargs_reject_decoder_only():
  with pytest.raises(ValueError, match='encoder-decoder'):
    hf_baseline.marian_kwargs(tiny_config(num_encoder_layers=0))


def test_eos_suppression_gives_exactly_new_tokens():
  config = tiny_config()
  model = hf_baseline.ours_model(config)
  assert not np.asarray(model.target_embed.embedding[...])[
      config.eos_id].any()
  source = hf_baseline.random_source(config, batch=8)
  assert source.shape == (8, 8)
  assert (source > max(config.pad_id, config.eos_id, config.bos_id)).all()
  result = generate.greedy(model, source, max_len=NEW_TOKENS)
  assert (np.asarray(result.lengths) == NEW_TOKENS).all()
  hf_baseline.check_ours(result, NEW_TOKENS, config.eos_id)


def test_check_ours_fails_loudly_on_short_output():
  # An example that stopped at eos after 3 tokens.
  tokens = np.full((2, NEW_TOKENS), 5)
  tokens[1, 2:] = [1] + [0] * (NEW_TOKENS - 3)
  result = types.SimpleNamespace(tokens=tokens,
                                 lengths=np.array([NEW_TOKENS, 3]))
  with pytest.raises(RuntimeError, match=f'exactly {NEW_TOKENS} tokens'):
    hf_baseline.check_ours(result, NEW_TOKENS, eos_id=1)


def synthetic_rows(batch):
  rows = [(hf_baseline.OURS, 300.0), (hf_baseline.HF_DYNAMIC, 100.0),
          (hf_baseline.HF_STATIC, 200.0)]
  return [dict(system=system, size='small', batch=batch, new_tokens=10,
               compile_s=1.0, wall_s=batch * 10 / tps, tokens_per_s=tps,
               ms_per_step=100.0 * batch / tps) for system, tps in rows]


def test_ratios_against_the_fastest_hf_option():
  rows = {row['system']: row
          for row in hf_baseline.add_ratios(synthetic_rows(batch=1))}
  ours = rows[hf_baseline.OURS]
  assert ours['ratio'] == pytest.approx(1.5)  # 300 / max(100, 200).
  assert ours['target'] == 1.5 and not ours['fastest_hf']
  assert rows[hf_baseline.HF_STATIC]['fastest_hf']
  assert not rows[hf_baseline.HF_DYNAMIC]['fastest_hf']
  assert rows[hf_baseline.HF_DYNAMIC]['ratio'] == pytest.approx(3.0)
  assert rows[hf_baseline.HF_STATIC]['target'] is None
  assert hf_baseline.add_ratios(synthetic_rows(32))[0]['target'] == 1.0


def test_markdown_table():
  table = hf_baseline.to_markdown(hf_baseline.add_ratios(synthetic_rows(1)))
  lines = table.splitlines()
  assert len(lines) == 2 + 3
  for column in hf_baseline.COLUMNS:
    assert column in lines[0]
  assert '1.50x' in lines[2] and '>= 1.5x' in lines[2]
  assert lines[4].startswith('| hf generate static ')
  assert lines[4].rstrip(' |').endswith('*')


def test_hf_config_fields_equal_ours():
  transformers = pytest.importorskip('transformers')
  config = tiny_config()
  marian = transformers.MarianConfig(**hf_baseline.marian_kwargs(config))
  assert (marian.d_model, marian.encoder_layers, marian.decoder_layers,
          marian.encoder_attention_heads, marian.decoder_attention_heads,
          marian.encoder_ffn_dim, marian.decoder_ffn_dim, marian.vocab_size,
          marian.activation_function, marian.scale_embedding,
          marian.tie_word_embeddings) == (
              config.d_model, config.num_encoder_layers,
              config.num_decoder_layers, config.num_heads, config.num_heads,
              config.d_ff, config.d_ff, config.vocab_size, 'relu', True,
              config.tie_output)


def test_measure_runs_every_system_on_a_tiny_model():
  pytest.importorskip('torch')
  pytest.importorskip('transformers')
  rows = hf_baseline.measure('tiny', batch=2, new_tokens=4, repeats=1,
                             compile_hf=False, progress=lambda _: None)
  assert [row['system'] for row in rows] == [
      hf_baseline.OURS, hf_baseline.HF_DYNAMIC, hf_baseline.HF_STATIC]
  assert sum(row['fastest_hf'] for row in rows) == 1
  for row in rows:
    assert row['tokens_per_s'] == pytest.approx(2 * 4 / row['wall_s'])
