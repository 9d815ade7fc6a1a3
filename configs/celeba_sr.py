"""CelebA 8x8 -> 32x32 super-resolution: the paper's image experiments.

Stern, Shazeer and Uszkoreit 2018 evaluate blockwise parallel decoding on
image super-resolution as well as translation: a conditional Image
Transformer (Parmar et al. 2018) on CelebA faces, center-cropped and
downsampled to 32x32 targets and 8x8 inputs, generating the 32x32x3 = 3,072
output intensities one at a time in raster order. Every run is an option
of this one config:

    k=K              proposal heads (1: the base model; default 8)
    base=finetuned   fine-tune the whole model with the heads (default
                     frozen: the base stays bit-identical)
    eps=E            also evaluate the distance criterion |proposal -
                     argmax| <= E intensities (default 2; 0: exact only)
    topk=T           also evaluate top-T verification (default 0: none)
    min_block=L      accept at least L intensities per call (1..k)
    init_from=DIR    train only the heads, on the base of the run in DIR
                     (base_steps=0)
    data_dir=DIR     the TFDS data dir (default ~/tensorflow_datasets)
    runlocal         a tiny model on TFDS mock data, 16x16 from 8x8: any
                     row in a few minutes on a CPU, no data needed (checks
                     the setup)
    image_targets=T  'residuals' (default: each output intensity minus a
                     reference upsampling of the input there) or
                     'intensities'
    reference=R      the reference of residuals: 'linear' (default), a 5x5
                     filter fitted by least squares on the training split
                     before training, or 'bicubic'
    mixture=M        a discretized logistic mixture of M components over
                     the values (default 1; 0: a softmax over them)
    window=W         each decoder input also reads the W x W input pixels
                     around the one under it (odd; default 0: off)

First, once, on a machine with the data (TFDS downloads CelebA from its
source; array_record is the format `tfds.data_source` reads):

    tfds build celeb_a --data_dir=$DATA --file_format=array_record

The base (k=1), then heads on it, then approximate verification:

    python -m bpd_jax.main --config=configs/celeba_sr.py:data_dir=$DATA,k=1 \
        --workdir=$RUNS/sr_base
    python -m bpd_jax.main --config=configs/celeba_sr.py:data_dir=$DATA,k=8,base=finetuned,init_from=$RUNS/sr_base \
        --workdir=$RUNS/sr_k8
    python -m bpd_jax.evaluate --config=configs/celeba_sr.py:data_dir=$DATA,k=8,base=finetuned,init_from=$RUNS/sr_base,eps=4,topk=2 \
        --workdir=$RUNS/sr_k8
    launch/sweep.py --config=configs/celeba_sr.py --workdir=$RUNS \
        --grid='k=2,4,6,8,10' --fixed='data_dir=$DATA,base=finetuned,init_from=$RUNS/sr_base'

Sized for accelerators: 100k base steps and 50k head steps of 32 images
(runlocal: minutes on a CPU). The report, WORKDIR/sr_test.json and the table printed, gives per decoder
(greedy; blockwise for k with exact verification, distance eps and top-T)
the mean accepted block size, wall-clock per image and speedup, PSNR and
SSIM against the ground truth and against greedy's output; sr_test.png
shows input, bicubic, the fitted filter's, every decoder's output and the
ground truth. Each process reads and preprocesses only its shard of the
training split (cached in WORKDIR/data), but for process 0, which reads
the whole split once to fit the reference filter.

The model and loss are configs/sr_demo.py's (docs/guide/images.md): the
decoder writes residuals from a linear filter fitted to the training
images (bicubic's detail and more), its output is a
discretized logistic mixture (PixelCNN++'s, which the Image Transformer
uses), and most previous intensities are hidden from it in training. The
sizes are our choice where the paper leaves them open: encoder 4 layers
over the 192 input intensities, decoder 8 layers with local 1D attention
(query blocks of 96 positions, one image row, and the row above),
d_model 512, d_ff 2048, 8 attention heads, image positions, batches of
32 images, 100k base steps and 50k head steps.

What the paper reports, and how to launch on accelerators:
docs/guide/paper.md; no CelebA run has been measured here yet
(docs/results/images.md has the CPU demo's). Fields not set here keep
configs/base.py's value (documented there).
"""

import os

from bpd_jax.infra import config_options

base = config_options.sibling(__file__, 'base')

BASES = ('frozen', 'finetuned')


def get_config(arg=None):
  options = config_options.parse(
      arg, k=8, base='frozen', eps=2, topk=0, min_block=1, init_from='',
      data_dir='~/tensorflow_datasets', runlocal=False,
      image_targets='residuals', reference='', mixture=1, window=0)
  k, local = options['k'], options['runlocal']
  if k < 1:
    raise ValueError(f'config option k={k} must be >= 1.')
  config_options.check_choice(options, 'base', BASES)
  if options['eps'] < 0 or options['topk'] < 0:
    raise ValueError(f'config options eps={options["eps"]} and topk='
                     f'{options["topk"]} must be >= 0 (0: not evaluated).')
  if not 1 <= options['min_block'] <= k:
    raise ValueError(f'config option min_block={options["min_block"]} must '
                     f'be in [1, k={k}].')
  init_from = options['init_from']
  if init_from and k == 1:
    raise ValueError('config option init_from trains heads on a base: it '
                     'needs k >= 2.')
  high_res = 16 if local else 32
  low_res = 8
  config = base.get_config()

  task = config.task
  task.name = 'tfds_images'  # A TFDS image dataset, preprocessed for SR.
  task.dataset = 'celeb_a'  # TFDS name.
  task.data_dir = options['data_dir']  # Where `tfds build` prepared it.
  task.splits = dict(train='train', validation='validation',
                     test='test')  # Our split: the dataset's.
  task.mock_examples = 48 if local else 0  # > 0: TFDS mock data, no data dir.
  task.high_res = high_res  # Side of the targets: center crop, area-downsampled.
  task.low_res = low_res  # Side of the inputs, area-downsampled from targets.
  task.max_source_len = low_res * low_res * 3  # Input intensities, no eos.
  task.max_target_len = high_res * high_res * 3  # Output intensities.
  # Target ids: 'residuals' from a reference upsampling of the input (the
  # model starts from the reference's image), or 'intensities' themselves.
  task.targets = options['image_targets']
  # The reference of residuals: 'linear', a filter fitted by least squares
  # on the training split (WORKDIR/reference_filter.npz), or 'bicubic'.
  # (Intensity targets have none: 'bicubic', the field's neutral value.)
  task.reference = options['reference'] or (
      'linear' if options['image_targets'] == 'residuals' else 'bicubic')
  task.reference_window = 5  # Input pixels around each output's, a side.
  # Heads on another run's base read that run's filter ('': this run's).
  task.reference_path = (os.path.join(init_from, 'reference_filter.npz')
                         if init_from and task.reference == 'linear' else '')

  model = config.model
  model.size = 'tiny' if local else 'base'  # Starting sizes, overridden below.
  model.d_model = 32 if local else 512  # Width of every layer.
  model.d_ff = 64 if local else 2048  # Feed-forward hidden width.
  model.num_heads = 4 if local else 8  # Attention heads.
  model.num_encoder_layers = 1 if local else 4  # Over the input intensities.
  model.num_decoder_layers = 2 if local else 8  # Decoder depth.
  model.dropout_rate = 0.0 if local else 0.1  # Training only.
  model.positions = 'image'  # Codes of each pixel's place in its image.
  model.source_image_side = low_res  # Side of the input image.
  model.target_image_side = high_res  # Side of the output image.
  model.image_channels = 3  # Intensities per pixel (RGB).
  model.image_source_skip = False  # Conditioning by cross-attention alone.
  # And the window x window input pixels around each output pixel, with its
  # place inside its input pixel (0: none).
  model.image_source_window = options['window']
  model.local_attention_block = high_res * 3  # Query block: one image row.
  model.local_attention_memory = high_res * 3  # And the row above it.
  model.max_source_len = low_res * low_res * 3  # Longest input.
  model.max_target_len = high_res * high_res * 3 + max(k, 10)  # Output + k.
  model.num_proposal_heads = k  # k heads; decoding may use any k up to this.
  model.head_layer = 'joint'  # The paper's head: one shared hidden layer.
  model.head_hidden = 32 if local else 2048  # Hidden width of the head layer.
  # Output: a discretized logistic mixture of this many components over the
  # values (127 is near 128); 0: a softmax that treats every miss alike.
  model.mixture_components = options['mixture']

  train = config.train
  train.batch_size = 8 if local else 32  # Images a step, over all devices.
  base_steps = 10 if local else 100_000
  head_steps = 6 if local else 50_000
  train.base_steps = 0 if init_from else base_steps  # Phase 'base'.
  train.head_steps = head_steps if k > 1 else 0  # Phase 'heads'.
  train.freeze_base = options['base'] == 'frozen'  # Base bit-identical.
  train.head1_weight = 0.5  # Head 1's share of a fine-tuning loss (0: 1/k).
  train.random_head = not local  # One random head's loss a step (the paper's).
  train.init_from = init_from  # Workdir of the base the heads start from.
  train.learning_rate = 2e-3 if local else 5e-4  # Peak, after warm-up.
  train.warmup_steps = 5 if local else 4000  # Linear warm-up, then 1/sqrt.
  train.label_smoothing = 0.0  # Intensities are ordinal: no smoothing.
  # Previous intensities hidden in training: the model reads the input
  # image, not its last intensity (configs/sr_demo.py).
  train.input_dropout = 0.9
  train.log_every = 5 if local else 500  # Steps between progress lines.
  train.checkpoint_every = 100 if local else 5000  # Steps between checkpoints.

  ev = config.eval
  ev.split = 'test'  # Split decoded by evaluation.
  ev.num_examples = 4 if local else 256  # First N images (0: all).
  ev.grid_examples = 4 if local else 8  # Images drawn in the PNG grid.
  ev.max_len = high_res * high_res * 3  # Intensities generated an image.
  ev.ks = tuple(sorted({j for j in (2, 4, 6, 8, 10)
                       if options['min_block'] <= j < k} | {k})
                ) if k > 1 else ()  # Blockwise block sizes, up to k.
  criteria = ['exact']
  if options['eps']:
    criteria.append(f'distance:{options["eps"]}')
  if options['topk']:
    criteria.append(f'top-k:{options["topk"]}')
  ev.criteria = tuple(criteria)  # Verification criteria, each at every k.
  ev.min_block = options['min_block']  # Fewest accepted per call (<= min k).
  ev.periodic_examples = 4  # Images decoded by those evaluations.
  return config
