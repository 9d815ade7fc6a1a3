"""Image super-resolution in minutes on a CPU: 8x8 -> 16x16 real photos.

    python -m bpd_jax.main --config=configs/sr_demo.py --workdir=/tmp/bpd_sr

The super-resolution job of the paper (Stern et al. 2018: an Image
Transformer, CelebA 8x8 -> 32x32; configs/celeba_sr.py) scaled to run on
a CPU with no download: crops of the colour photos that ship inside
scikit-image and matplotlib (bpd_jax/tasks/images/embedded_photos.py;
the validation photo is a portrait no training crop comes from). A small
conditional Image Transformer (the encoder reads the 8x8x3 input's
intensities; the decoder writes the 16x16x3 = 768 output intensities in
raster order with local 1D attention, each position seeing its own image
row and the row above) writes each intensity as its residual from a
reference upsampling of the input, through a discretized logistic
mixture (docs/guide/images.md: an untrained model returns the
reference's image, and 127 is near 128). The reference is a linear
filter fitted by least squares on the training crops before training
(each output pixel from the 5x5 input pixels around its own and its
bicubic value; seconds, kept in WORKDIR/reference_filter.npz), which
recovers detail bicubic misses. Most previous intensities are hidden from it in
training (input dropout), so that it reads the input image rather than
copy its last intensity, which proposal heads cannot foresee. It trains
200 steps, then 8 proposal heads with the whole model fine-tuned for 100
steps. Then it decodes 16 validation images greedily and blockwise (k =
2, 4, 8; exact verification and the distance criterion |proposal -
argmax| <= 16) and writes WORKDIR/sr_validation.json and
sr_validation.png: per image the input, bicubic upsampling, the fitted
filter's, every decoder's output and the ground truth; per decoder PSNR and SSIM against
the ground truth and against greedy's output, the mean accepted block
size, the wall-clock per image and the images that are one flat colour.
Minutes on a 2-core CPU; measured figures: docs/results/images.md.

Exact verification returns greedy's image, pixel for pixel (but where
two values tie to float32 rounding: docs/guide/images.md). The distance
criterion accepts proposals within 16 intensities of greedy's choice.

Options (`--config=configs/sr_demo.py:quick,mixture=...`):
quick (a one-minute run that shows the pipeline, not the quality);
image_targets ('residuals', default, or 'intensities': what the decoder
writes); reference (what residuals are taken from: 'linear', default,
the fitted filter, or 'bicubic'); mixture (components of the discretized
logistic mixture output, default 1; 0: a softmax over the values);
window (each decoder input also reads the window x window input pixels
around its own, odd; default 0: off). Any field can be overridden, e.g.
`--config.eval.criteria="('exact','distance:2')"`. Fields not set here
keep configs/base.py's value (documented there).
"""

from bpd_jax.infra import config_options

base = config_options.sibling(__file__, 'base')


def get_config(arg=None):
  options = config_options.parse(arg, quick=False,
                                 image_targets='residuals', reference='',
                                 mixture=1, window=0)
  quick = options['quick']
  high_res, low_res = 16, 8
  config = base.get_config()

  task = config.task
  task.name = 'embedded_images'  # Crops of the photos shipped with the code.
  task.high_res = high_res  # Side of the targets, in pixels.
  task.low_res = low_res  # Side of the inputs (high_res must be a multiple).
  task.sizes = dict(train=20_000, validation=64)  # Crops a split.
  task.scales = (1, 2, 4, 8)  # Photo downsampling factors crops come from.
  task.max_source_len = low_res * low_res * 3  # Input intensities, no eos.
  task.max_target_len = high_res * high_res * 3  # Output intensities.
  # Target ids: 'residuals' from a reference upsampling of the input (the
  # model starts from the reference's image), or 'intensities' themselves.
  task.targets = options['image_targets']
  # The reference of residuals: 'linear', a filter fitted by least squares
  # on the training crops (WORKDIR/reference_filter.npz), or 'bicubic'.
  # (Intensity targets have none: 'bicubic', the field's neutral value.)
  task.reference = options['reference'] or (
      'linear' if options['image_targets'] == 'residuals' else 'bicubic')
  task.reference_window = 5  # Input pixels around each output's, a side.

  model = config.model
  model.size = 'tiny'  # models/transformer_config.py SIZES, overridden below.
  model.d_model = 64  # Width of every layer.
  model.d_ff = 256  # Feed-forward hidden width.
  model.num_heads = 4  # Attention heads.
  model.num_encoder_layers = 2  # Encoder over the input's intensities.
  model.num_decoder_layers = 2  # Decoder depth.
  model.dropout_rate = 0.0  # 20k crops, under one epoch: no overfitting.
  model.positions = 'image'  # Codes of each pixel's place in its image.
  model.source_image_side = low_res  # Side of the input image.
  model.target_image_side = high_res  # Side of the output image.
  model.image_channels = 3  # Intensities per pixel (RGB).
  model.image_source_skip = True  # Decoder input + the input pixel under it.
  # And the window x window input pixels around it, with the output pixel's
  # place inside it (0: none).
  model.image_source_window = options['window']
  model.local_attention_block = high_res * 3  # Query block: one image row.
  model.local_attention_memory = high_res * 3  # And the row above it.
  model.max_source_len = low_res * low_res * 3  # Longest input.
  model.max_target_len = high_res * high_res * 3 + 8  # Output + k positions.
  model.num_proposal_heads = 8  # k heads; decoding may use any k up to this.
  model.head_hidden = 128  # Hidden width of one head's layer.
  # Output: a discretized logistic mixture of this many components over the
  # values (127 is near 128); 0: a softmax that treats every miss alike.
  model.mixture_components = options['mixture']

  train = config.train
  train.batch_size = 16  # Images a step, over all devices.
  train.base_steps = 60 if quick else 200  # Phase 'base': the whole model.
  train.head_steps = 30 if quick else 100  # Phase 'heads': heads (+ base).
  train.freeze_base = False  # Fine-tune all (longer blocks); True: frozen.
  train.head1_weight = 0.5  # Head 1's share of a fine-tuning loss (0: 1/k).
  train.learning_rate = 5e-3  # Peak learning rate, reached after warm-up.
  train.warmup_steps = 50  # Linear warm-up, then a linear decay to 0
  train.schedule = 'linear'  # at each phase's end (a run of known length).
  train.label_smoothing = 0.0  # Intensities are ordinal: no smoothing.
  # Previous intensities hidden in training: the model reads the input
  # image, not its last intensity (which copied, made flat squares).
  train.input_dropout = 0.9
  # The heads learn on a quarter of each image's positions (neighbours
  # teach much the same), a quarter of their cost.
  train.head_position_fraction = 0.25
  train.log_every = 20 if quick else 200  # Steps between progress lines.

  ev = config.eval
  ev.num_examples = 4 if quick else 16  # First N images (0: all).
  ev.grid_examples = 4 if quick else 8  # Images drawn in the PNG grid.
  ev.max_len = high_res * high_res * 3  # Intensities generated an image.
  ev.ks = (2, 4, 8)  # Blockwise block sizes compared with greedy.
  ev.criteria = ('exact', 'distance:16')  # Per k: the verification criteria.
  ev.min_block = 1  # Fewest intensities accepted per call (<= the smallest k).
  ev.periodic_examples = 4  # Images decoded by those evaluations.
  return config
