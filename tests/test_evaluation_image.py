"""Super-resolution evaluation: metrics, decoders, the report and its grid."""

import json

import numpy as np
import pytest
from flax import nnx

from bpd_jax import evaluation
from bpd_jax.evaluation import image
from bpd_jax.evaluation import spec
from bpd_jax.evaluation.spec import DecoderSpec
from bpd_jax.models import Transformer, TransformerConfig
from bpd_jax.models.mixture import OutputMixture
from bpd_jax.models.positions import ImagePositions
from bpd_jax.tasks.images import task as image_task
from bpd_jax.tasks.images.fitted_filter import FittedFilter
from bpd_jax.tasks.images.tokens import ImageVocabulary

import train_configs


def test_psnr_of_a_known_error_and_of_identical_images():
  truth = np.zeros((2, 4, 4, 3), np.uint8)
  test = truth.copy()
  test[0] += 10  # MSE 100: 10 log10(255^2 / 100) = 28.13 dB.
  assert image.psnr(truth, test) == pytest.approx(28.13, abs=0.01)
  # The identical second image is left out (its PSNR is infinite).
  assert image.psnr(truth, truth) is None


def test_ssim_is_1_for_identical_images_and_lower_otherwise():
  rng = np.random.default_rng(0)
  truth = rng.integers(0, 256, (3, 16, 16, 3), dtype=np.uint8)
  assert image.ssim(truth, truth) == 1.0
  noisy = np.clip(truth + rng.normal(0, 40, truth.shape), 0, 255).astype(
      np.uint8)
  assert image.ssim(truth, noisy) < 0.9
  # Images smaller than the 7x7 window use a window of their side.
  assert image.ssim(truth[:, :4, :4], truth[:, :4, :4]) == 1.0


def test_flat_images_are_one_colour_whatever_the_colour():
  rng = np.random.default_rng(0)
  images = rng.integers(0, 256, (4, 8, 8, 3), dtype=np.uint8)
  images[1] = 200  # Flat.
  images[2] = [10, 120, 240]  # Flat, and not grey.
  images[3, ..., 0] = 9  # One channel flat: an image still.
  assert image.flat_images(images) == 2
  noise = np.clip(images[1:2] + rng.integers(-3, 4, images[1:2].shape),
                  0, 255).astype(np.uint8)
  assert image.flat_images(noise) == 1  # Below FLAT_STD.


def test_decoders_are_greedy_then_every_k_and_criterion():
  config = train_configs.load_config('sr_demo')
  names = [d.name for d in spec.decoders_from_config(config.eval)]
  assert names[0] == 'greedy'
  assert len(names) == 1 + len(config.eval.ks) * len(config.eval.criteria)
  assert 'blockwise k=8 distance:16' in names


def tiny_image_task(count=5, high=4, low=2, targets='intensities',
                    fitted=False):
  """fitted: residuals from a filter fitted on these images, not bicubic."""
  rng = np.random.default_rng(1)
  high_images = rng.integers(0, 256, (count, high, high, 3), dtype=np.uint8)
  low_images = high_images.reshape(count, low, high // low, low, high // low,
                                   3).mean((2, 4)).astype(np.uint8)
  reference = (FittedFilter.fit(low_images, high_images, 1) if fitted
               else None)
  return image_task.ImageTask((high, high, 3), (low, low, 3),
                               {'validation': lambda: (low_images,
                                                       high_images)},
                               vocab=ImageVocabulary(targets, reference))


def tiny_image_model(high=4, low=2, seed=0, targets='intensities',
                     mixture=None, window=0):
  """window > 0: image positions, the input skip and that input window."""
  image_positions = None
  if window:
    image_positions = ImagePositions(low, high, 3, source_skip=True,
                                     source_window=window)
  config = TransformerConfig(
      vocab_size=ImageVocabulary(targets).vocab_size, d_model=16, d_ff=32,
      num_heads=2, num_encoder_layers=1, num_decoder_layers=2,
      dropout_rate=0.0, positions='image' if window else 'learned',
      image=image_positions, max_source_len=low * low * 3,
      max_target_len=high * high * 3 + 4, num_proposal_heads=4,
      head_hidden=16, local_attention_block=6, local_attention_memory=6,
      mixture=mixture)
  model = Transformer(config, rngs=nnx.Rngs(seed))
  # Heads that repeat head 1's token: long accepted blocks on a random model.
  model.heads.w_out[...] = model.heads.w_out[...] * 0.0
  return model


def test_exact_blockwise_images_equal_greedy_and_distance_accepts_more():
  task, model = tiny_image_task(), tiny_image_model()
  decoders = [DecoderSpec.of(48), DecoderSpec.of(48, 4),
              DecoderSpec.of(48, 4, 'distance:255')]
  result = image.evaluate(model, task, 'validation', decoders,
                          batch_size=2, log=lambda m: None)
  bicubic, greedy, exact, loose = result['rows']
  assert bicubic['decoder'] == 'bicubic' and bicubic['psnr'] > 0
  assert exact['identical_to_greedy'] == 1.0
  assert exact['psnr_vs_greedy'] is None  # Identical: infinite PSNR.
  assert exact['psnr'] == greedy['psnr']
  np.testing.assert_array_equal(result['outputs']['blockwise k=4'],
                                result['outputs']['greedy'])
  # Distance 255 accepts every proposal: blocks of k but for the last one.
  assert loose['mean_block'] > exact['mean_block']
  assert loose['mean_block'] >= 3.5
  assert greedy['mean_block'] == 1.0
  assert result['outputs']['greedy'].shape == (5, 4, 4, 3)


@pytest.mark.parametrize('window, fitted', [
    pytest.param(0, False, marks=pytest.mark.slow), (3, False), (0, True)])
def test_a_mixture_over_residuals_decodes_exactly_and_starts_at_the_reference(
    window, fitted):
  """Residual targets and a mixture output, with or without the input
  window, from bicubic or a fitted filter: exact blockwise == greedy on
  every image, and an untrained model (every component centred on the
  reference, a few values wide) returns the reference's image within its
  kernel's start; a fitted reference has its own row."""
  task = tiny_image_task(targets='residuals', fitted=fitted)
  model = tiny_image_model(targets='residuals', mixture=OutputMixture(3, 3),
                           window=window)
  decoders = [DecoderSpec.of(48), DecoderSpec.of(48, 4),
              DecoderSpec.of(48, 4, 'distance:8')]
  result = image.evaluate(model, task, 'validation', decoders,
                          batch_size=2, log=lambda m: None)
  *references, greedy, exact, _ = result['rows']
  assert [row['decoder'] for row in references] == (
      ['bicubic', image.FITTED] if fitted else ['bicubic'])
  assert exact['identical_to_greedy'] == 1.0
  np.testing.assert_array_equal(result['outputs']['blockwise k=4'],
                                result['outputs']['greedy'])
  reference = result['baselines'][references[-1]['decoder']]
  difference = np.abs(result['outputs']['greedy'].astype(int)
                      - reference.astype(int))
  assert difference.max() <= 8, difference.max()
  assert image.training_figures(result) == {'eval/psnr': greedy['psnr'],
                                            'eval/ssim': greedy['ssim']}


def test_report_writes_the_json_and_the_grid(tmp_path):
  config = train_configs.load_config('sr_demo', 'quick')
  config.eval.update(ks=(2,), criteria=('exact',), num_examples=3,
                     grid_examples=2, batch_size=1, max_len=4 * 4 * 3)
  config.mesh.shape = (1,)
  lines = []
  evaluation.report(config, str(tmp_path), tiny_image_model(),
                    tiny_image_task(), log=lines.append)
  report = json.loads((tmp_path / 'sr_validation.json').read_text())
  assert [r['decoder'] for r in report['rows']] == [
      'bicubic', 'greedy', 'blockwise k=2']
  evaluation.report(config, str(tmp_path / 'fitted'), tiny_image_model(
      targets='residuals'), tiny_image_task(targets='residuals', fitted=True),
                    log=lines.append)
  report = json.loads((tmp_path / 'fitted' / 'sr_validation.json')
                      .read_text())
  assert [r['decoder'] for r in report['rows']] == [
      'bicubic', image.FITTED, 'greedy', 'blockwise k=2']
  assert report['examples'] == 3 and report['image_shape'] == [4, 4, 3]
  assert (tmp_path / 'sr_validation.png').read_bytes()[:4] == b'\x89PNG'
  assert any('| decoder' in line for line in lines)


def test_evaluate_needs_greedy_first():
  with pytest.raises(ValueError, match='must be greedy'):
    image.evaluate(tiny_image_model(), tiny_image_task(), 'validation',
                   [DecoderSpec.of(4 * 4 * 3, 2)], batch_size=1)
