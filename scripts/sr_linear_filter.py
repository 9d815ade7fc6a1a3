"""How much a linear filter on the input's neighbourhood beats bicubic.

    python scripts/sr_linear_filter.py [--windows=1,3,5] [--examples=16]

For configs/sr_demo.py's data (8x8 -> 16x16 crops of the embedded
photos): fits, by least squares on the training crops, the filter that
task.reference 'linear' fits (bpd_jax/tasks/images/fitted_filter.py: one
linear map per output channel and sub-pixel phase from the W x W input
pixels around an output pixel, its bicubic value and a constant), for
each window W; then prints the PSNR of bicubic and of each filter on the
first validation images (those the demo reports) and on as many crops of
the test photo (a portrait no choice was made on; the demo's report with
--config.task.sizes including 'test': N). Seconds to a minute on a
2-core CPU.
"""

import argparse

from bpd_jax.evaluation import image as image_eval
from bpd_jax.tasks.images import embedded_photos
from bpd_jax.tasks.images import fitted_filter
from bpd_jax.tasks.images import tokens

HIGH, LOW = 16, 8  # configs/sr_demo.py's sides.
TRAIN_CROPS = 20_000  # Its task.sizes['train'].


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--windows', default='1,3,5',
                      help='odd window sides, comma-separated')
  parser.add_argument('--examples', type=int, default=16,
                      help='validation and test images measured (the demo: '
                      '16)')
  args = parser.parse_args()
  windows = [int(w) for w in args.windows.split(',')]
  if any(w < 1 or w % 2 == 0 for w in windows) or args.examples < 1:
    parser.error('windows must be odd integers >= 1 and examples >= 1')
  train = embedded_photos.crops('train', TRAIN_CROPS, HIGH, LOW)
  low, high = embedded_photos.crops('validation', 64, HIGH, LOW)
  measured = {f'{args.examples} validation images':
                  (low[:args.examples], high[:args.examples]),
              f'{args.examples} test images': embedded_photos.crops(
                  'test', args.examples, HIGH, LOW)}
  filters = {f'linear filter, window {w}': fitted_filter.FittedFilter.fit(
      *train, w) for w in windows}
  for split, (inputs, truth) in measured.items():
    print(f'{split}: bicubic PSNR '
          f'{image_eval.psnr(truth, tokens.bicubic(inputs, HIGH)):.2f} dB')
    for name, upsample in filters.items():
      print(f'  {name}: PSNR {image_eval.psnr(truth, upsample(inputs)):.2f} '
            f'dB')


if __name__ == '__main__':
  main()
