"""The super-resolution report: decode images, measure them, draw the grid.

The report of image tasks (`reports.Report`): used by the main and evaluate
jobs and periodic evaluation when the task is an image task
('embedded_images', 'tfds_images'). Every decoder (greedy, then blockwise
for each k in eval.ks and each criterion in eval.criteria) generates the
high-resolution image of each low-resolution input, H * W * C intensities
in raster order, through the harness (`runner.run`: eval.repeats timed rounds,
interleaved, after compiling). The report gives, per decoder:
- mean accepted block size (intensities per model call), model calls,
  wall-clock per image and speedup over greedy;
- PSNR and SSIM against the ground truth, and against greedy's output
  (exact verification reproduces greedy's image: identical_to_greedy 1.0,
  PSNR infinite, reported as null);
- special_tokens: ids that are no intensity (pad, eos, bos) in the output,
  drawn black. A trained model never emits them; a count above 0 means an
  image ended early.
- flat_images: outputs that are one flat colour (`flat_images`), the
  failure of a model that copies its previous intensity; the ground
  truth's own count is the summary's truth_flat_images.
Bicubic upsampling of the input is reported beside them, the baseline any
learned super-resolution has to beat, and where the residuals are taken
from a filter fitted to the training images (task.reference 'linear'),
that filter's image too (FITTED): the image of a model that adds nothing
to it.

Files: WORKDIR/sr_<split>.json (the rows, the config), sr_<split>.png (per
example: input, bicubic (, the fitted filter), greedy, each blockwise
decoder, ground truth).
"""

import numpy as np

from bpd_jax.evaluation import outputs as outputs_lib
from bpd_jax.evaluation import runner
from bpd_jax.evaluation.spec import DecoderSpec
from bpd_jax.infra import extras
from bpd_jax.infra import figures
from bpd_jax.tasks.images import task as image_task
from bpd_jax.tasks.images import tokens as images_lib

COLUMNS = ('decoder', 'mean_block', 'model_calls', 's_per_image', 'speedup',
           'psnr', 'ssim', 'psnr_vs_greedy', 'identical_to_greedy',
           'flat_images')
FITTED = 'fitted filter'  # The row and column of task.reference 'linear'.
# An image whose every channel's intensities have a standard deviation
# below this is one flat colour.
FLAT_STD = 4.0


def psnr(truth: np.ndarray, test: np.ndarray) -> float | None:
  """Mean PSNR in dB over images [N, H, W, C] uint8; None if all identical.

  Identical images have an infinite PSNR; they are left out of the mean
  (identical_to_greedy counts them).
  """
  metrics = extras.load('skimage.metrics')  # The images extra.
  values = [metrics.peak_signal_noise_ratio(a, b, data_range=255)
            for a, b in zip(truth, test) if not np.array_equal(a, b)]
  return round(float(np.mean(values)), 2) if values else None


def ssim(truth: np.ndarray, test: np.ndarray) -> float:
  """Mean SSIM over images [N, H, W, C] uint8 (a 7x7 window, or the side)."""
  side = min(truth.shape[1:3])
  window = min(7, side - (1 - side % 2))  # Odd, at most the image side.
  metrics = extras.load('skimage.metrics')  # The images extra.
  return round(float(np.mean([
      metrics.structural_similarity(a, b, data_range=255, channel_axis=-1,
                                    win_size=window)
      for a, b in zip(truth, test)])), 4)


def flat_images(images: np.ndarray) -> int:
  """How many of uint8 [N, H, W, C] images are one flat colour: every
  channel's standard deviation over the pixels below FLAT_STD."""
  pixels = images.reshape(len(images), -1, images.shape[-1]).astype(float)
  return int((pixels.std(axis=1).max(axis=1) < FLAT_STD).sum())


def evaluate(model, task: image_task.ImageTask, split: str,
             decoders: list[DecoderSpec], *, batch_size: int,
             num_examples: int = 0, repeats: int = 1, mesh=None,
             param_rules=(), draft_vocab=None,
             rescorers=None, log=print) -> dict:
  """Decodes the images of `split` with every decoder.

  Args:
    model: the Transformer (encoder over the input image's intensities).
    task: the image task.
    split: split name.
    decoders: greedy first (the reference of speedups and comparisons),
      each decoding a target's H * W * C intensities, its max_len
      (`ImageVocabulary.decode` refuses any other length).
    batch_size: images decoded together.
    num_examples: the first this many images (0: all).
    repeats, mesh, param_rules, draft_vocab, log: as
      `reports.Report.evaluate` takes them.

  Returns:
    dict(split, examples, image_shape, rows, outputs, low, high, baselines,
    truth_flat_images): a row per decoder after a bicubic row
    (and a FITTED row where residuals are taken from a fitted filter);
    outputs and baselines {name: uint8 [N, H, W, C]}.
  """
  shape = tuple(task.image_shape)
  low, high = task.images(split, num_examples)
  if not len(low):
    raise ValueError(f'split {split!r} has no images to decode.')
  # The images there are: num_examples may ask for more.
  log(f'Decoding {split} ({len(low)} images, '
      f'{"x".join(map(str, shape))}) with {len(decoders)} decoders:')
  sources, _ = task.sources(split, model.config.max_source_len, num_examples)
  measured = runner.decode_sources(
      model, sources, decoders, batch_size=batch_size,
      repeats=repeats, mesh=mesh, param_rules=param_rules,
      draft_vocab=draft_vocab, rescorers=rescorers, log=log)
  baselines = {'bicubic': images_lib.bicubic(low, shape[0])}
  if task.vocab.reference is not None:  # What residuals are taken from.
    baselines[FITTED] = task.vocab.upsampled(low, shape[0])
  rows = [dict(decoder=name, psnr=psnr(high, images), ssim=ssim(high, images),
               flat_images=flat_images(images))
          for name, images in baselines.items()]
  decode = lambda tokens: task.vocab.decode(tokens, low, shape)
  greedy = decode(measured[0].outputs.tokens)
  greedy_wall = measured[0].wall_s
  outputs = {}
  for run in measured:
    spec, tokens, wall = run.spec, run.outputs.tokens, run.wall_s
    decoded = decode(tokens)
    outputs[spec.name] = decoded
    identical = np.all(decoded == greedy, axis=(1, 2, 3))
    rows.append(dict(
        decoder=spec.name, k=max(spec.k, 1), criterion=spec.criterion,
        min_block=spec.min_block,
        mean_block=round(run.outputs.mean_block, 3),
        model_calls=run.outputs.iterations,
        s_per_image=round(wall / len(decoded), 4),
        speedup=round(greedy_wall / wall, 3),
        psnr=psnr(high, decoded), ssim=ssim(high, decoded),
        psnr_vs_greedy=psnr(greedy, decoded),
        ssim_vs_greedy=ssim(greedy, decoded),
        identical_to_greedy=round(float(identical.mean()), 4),
        special_tokens=int(images_lib.count_special(tokens).sum()),
        flat_images=flat_images(decoded)))
    log(f'  {spec.name}: mean block {rows[-1]["mean_block"]}, PSNR '
        f'{rows[-1]["psnr"]} dB, {rows[-1]["s_per_image"]} s an image')
  return dict(split=split, examples=len(low), image_shape=shape, rows=rows,
              outputs=outputs, low=low, high=high, baselines=baselines,
              truth_flat_images=flat_images(high))


def write_grid(path: str, result: dict, examples: int) -> None:
  """PNG: a row per example; input, bicubic (and the fitted filter), each
  decoder, ground truth."""
  plt = figures.pyplot()
  blocks = {row['decoder']: row.get('mean_block') for row in result['rows']}
  columns = ([('input', result['low'])] + list(result['baselines'].items())
             + [(name, images) for name, images in result['outputs'].items()]
             + [('ground truth', result['high'])])
  rows = min(examples, result['examples'])
  figure, axes = plt.subplots(rows, len(columns), squeeze=False,
                              figsize=(1.3 * len(columns), 1.3 * rows + 0.6))
  for j, (name, images) in enumerate(columns):
    title = name.replace('blockwise ', '')
    if blocks.get(name):
      title += f'\nblock {blocks[name]:.2f}'
    axes[0, j].set_title(title, fontsize=7)
    for i in range(rows):
      axes[i, j].imshow(images[i], interpolation='nearest')
      axes[i, j].axis('off')
  figure.tight_layout()
  figures.save(figure, path, dpi=120)


def write(result: dict, config, workdir: str, log) -> None:
  """WORKDIR/sr_<split>.json (the rows, not the images), the grid
  sr_<split>.png, and the table."""
  summary = dict(split=result['split'], examples=result['examples'],
                 image_shape=result['image_shape'],
                 truth_flat_images=result['truth_flat_images'],
                 rows=result['rows'])
  path = outputs_lib.write_rows(summary, config, workdir, COLUMNS, log,
                                stem='sr')
  grid = path.removesuffix('.json') + '.png'
  write_grid(grid, result, config.eval.grid_examples)
  log(f'{result["examples"]} {"x".join(map(str, result["image_shape"]))} '
      f'images of {config.eval.split}, decoded {config.eval.batch_size} at '
      f'a time. Report: {path}, grid: {grid}')


def training_figures(result: dict) -> dict[str, float]:
  """Greedy decoding's PSNR and SSIM."""
  greedy, = (row for row in result['rows'] if row['decoder'] == 'greedy')
  return {'eval/psnr': greedy['psnr'], 'eval/ssim': greedy['ssim']}
