"""How much a linear filter on the input's neighbourhood beats bicubic.

    python scripts/sr_linear_filter.py [--windows=1,3,5] [--examples=16]

For configs/sr_demo.py's data (8x8 -> 16x16 crops of the embedded
photos): fits, by least squares on the training crops, one linear map
per output channel and sub-pixel phase from the W x W input pixels
around an output pixel (every channel, edges repeated) and its bicubic
value to its residual from bicubic; then prints the PSNR of bicubic and
of bicubic + the fitted residual on the first validation images (those
the demo reports). The detail a model that reads this neighbourhood can
add beyond bicubic starts here (docs/results/images.md). A minute or two
on a 2-core CPU.
"""

import argparse

import numpy as np

from bpd_jax.evaluation import image as image_eval
from bpd_jax.tasks.images import embedded_photos
from bpd_jax.tasks.images import tokens

HIGH, LOW = 16, 8  # configs/sr_demo.py's sides.
TRAIN_CROPS = 20_000  # Its task.sizes['train'].


def neighbourhoods(low: np.ndarray, window: int) -> np.ndarray:
  """uint8 [n, LOW, LOW, C] -> float [n, HIGH, HIGH, window**2 * C]: each
  output pixel's window around the input pixel under it."""
  half = window // 2
  padded = np.pad(low.astype(np.float64),
                  ((0, 0), (half, half), (half, half), (0, 0)), mode='edge')
  shifted = [padded[:, dy:dy + LOW, dx:dx + LOW]
             for dy in range(window) for dx in range(window)]
  values = np.concatenate(shifted, axis=-1)
  scale = HIGH // LOW
  return values.repeat(scale, axis=1).repeat(scale, axis=2)


def filtered(window: int, train, validation) -> np.ndarray:
  """Bicubic + the least-squares residual of every validation pixel."""
  scale = HIGH // LOW

  def regressors(low, channel, phase):
    near, cubic = low
    rows, columns = phase
    near = near[:, rows::scale, columns::scale]
    cubic = cubic[:, rows::scale, columns::scale, channel]
    return np.concatenate([near.reshape(-1, near.shape[-1]),
                           cubic.reshape(-1, 1), np.ones((cubic.size, 1))],
                          axis=1), cubic

  prepared = [(neighbourhoods(low, window),
               tokens.bicubic(low, HIGH).astype(np.float64))
              for low in (train[0], validation[0])]
  out = prepared[1][1].copy()
  for channel in range(3):
    for phase in np.ndindex(scale, scale):
      x, cubic = regressors(prepared[0], channel, phase)
      truth = train[1][:, phase[0]::scale, phase[1]::scale, channel]
      weights, *_ = np.linalg.lstsq(x, (truth - cubic).reshape(-1),
                                    rcond=None)
      x, cubic = regressors(prepared[1], channel, phase)
      out[:, phase[0]::scale, phase[1]::scale, channel] = (
          cubic + (x @ weights).reshape(cubic.shape))
  return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--windows', default='1,3,5',
                      help='odd window sides, comma-separated')
  parser.add_argument('--examples', type=int, default=16,
                      help='validation images measured (the demo: 16)')
  args = parser.parse_args()
  windows = [int(w) for w in args.windows.split(',')]
  if any(w < 1 or w % 2 == 0 for w in windows) or args.examples < 1:
    parser.error('windows must be odd integers >= 1 and examples >= 1')
  train = embedded_photos.crops('train', TRAIN_CROPS, HIGH, LOW)
  low, high = embedded_photos.crops('validation', 64, HIGH, LOW)
  validation = (low[:args.examples], high[:args.examples])
  bicubic = tokens.bicubic(validation[0], HIGH)
  print(f'bicubic: PSNR {image_eval.psnr(validation[1], bicubic):.2f} dB '
        f'on {args.examples} validation images')
  for window in windows:
    out = filtered(window, train, validation)
    print(f'linear filter, window {window}: PSNR '
          f'{image_eval.psnr(validation[1], out):.2f} dB')


if __name__ == '__main__':
  main()
