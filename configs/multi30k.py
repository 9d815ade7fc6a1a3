"""Multi30k English->German: the same pipeline on real text.

    python -m bpd_jax.main --config=configs/multi30k.py --workdir=/tmp/bpd_m30k

Reads the plain-text corpus in ../shared/data/multi30k (train.en/.de: 29,000
pairs; val.en/.de: 1,014), trains a 4k SentencePiece vocabulary on the
training text (saved as WORKDIR/vocab.model), a 2+2-layer Transformer (phase
'base'), then 8 proposal heads on the frozen base (phase 'heads'), and
compares greedy and blockwise decoding on the validation split.

Expected on a 2-core CPU in about 45 minutes (measured: 46, partly beside
other jobs): BLEU 33.2 for every decoder, identical_to_greedy 1.0, mean
accepted block 1.33 / 1.44 / 1.45 / 1.45 for k = 2 / 4 / 6 / 8 (frozen base);
the README's Multi30k section has the whole table.

Options (`--config=configs/multi30k.py:data_dir=/path,quick`): data_dir (the
corpus directory), quick (a short run that checks the setup).
"""

import ml_collections

from bpd_jax import config_options


def get_config(arg=None):
  options = config_options.parse(arg, data_dir='../shared/data/multi30k',
                                 quick=False)
  quick = options['quick']
  config = ml_collections.ConfigDict()
  config.seed = 0  # Seed of the weights, data order, dropout and head draws.

  config.task = task = ml_collections.ConfigDict()
  task.name = 'parallel_text'  # Aligned plain-text files.
  task.data_dir = options['data_dir']  # Directory of {stem}.{lang} files.
  task.source_lang = 'en'  # Source file suffix.
  task.target_lang = 'de'  # Target file suffix.
  task.splits = dict(train='train', validation='val')  # Split name: file stem.
  task.train_limit = 2_000 if quick else 0  # Training pairs read (0: all).
  task.vocab_type = 'sentencepiece'  # Subwords trained on the training text.
  task.vocab_size = 1_000 if quick else 4_000  # Shared source/target pieces.
  task.max_source_len = 32  # Longest training source, in pieces with eos (99%).
  task.max_target_len = 32  # Longest training target, in pieces with eos (98%).

  config.model = model = ml_collections.ConfigDict()
  model.size = 'small'  # d_model 256, 4 attention heads; overridden below.
  model.d_ff = 512  # Feed-forward hidden width (2 cores: kept small).
  model.num_encoder_layers = 2  # Encoder depth.
  model.num_decoder_layers = 2  # Decoder depth.
  model.dropout_rate = 0.1  # Training only.
  model.max_source_len = 96  # Longest source the encoder takes (eval too).
  model.max_target_len = 112  # Decoder positions: eval.max_len + k must fit.
  model.num_proposal_heads = 8  # k heads; decoding may use any k up to this.
  model.head_layer = 'independent'  # 'independent' heads or the paper's 'joint' layer.
  model.head_hidden = 256  # Hidden width of one head's layer.
  model.head1_from_base = True  # Head 1 is the base model's own output.

  config.train = train = ml_collections.ConfigDict()
  train.batch_size = 64  # Sentence pairs a step, over all devices.
  train.base_steps = 60 if quick else 3_000  # Phase 'base': the whole model.
  train.head_steps = 20 if quick else 1_000  # Phase 'heads': the heads.
  train.freeze_base = True  # Heads on a frozen base (False: fine-tune all).
  train.head1_weight = 0.0  # Head 1's share of a fine-tuning loss (0: 1/k).
  train.random_head = False  # One random head a step (True) or the mean.
  train.init_from = ''  # Workdir of a trained base to start the heads from.
  train.learning_rate = 1e-3  # Peak learning rate, reached after warm-up.
  train.warmup_steps = 500  # Linear warm-up, then 1/sqrt(step) decay.
  train.label_smoothing = 0.1  # As in the paper.
  train.clip_norm = 1.0  # Global gradient norm clip (0: none).
  train.grad_accum_steps = 1  # Micro-batches accumulated per update.
  train.log_every = 20 if quick else 250  # Steps between progress lines.
  train.checkpoint_every = 1_000  # Steps between checkpoints.
  train.keep_checkpoints = 2  # Newest checkpoints kept.

  config.mesh = mesh = ml_collections.ConfigDict()
  mesh.shape = (-1,)  # Devices per mesh axis; -1: all the remaining ones.
  mesh.axes = ('data',)  # Mesh axis names.
  mesh.data_axis = 'data'  # The axis the batch is split along.
  mesh.param_rules = ()  # (regex on param path, spec) pairs; none: replicated.

  config.eval = ev = ml_collections.ConfigDict()
  ev.split = 'validation'  # Split decoded by evaluation.
  ev.num_examples = 50 if quick else 0  # First N sentences (0: all).
  ev.batch_size = 1  # Sentences decoded together (1: latency, as the paper).
  ev.max_len = 96  # Most pieces generated per sentence.
  ev.ks = (2, 4, 6, 8)  # Blockwise block sizes compared with greedy.
  ev.criterion = 'exact'  # 'exact', 'top-k:T' or 'distance:EPS'.
  ev.min_block = 1  # Fewest tokens accepted per call (<= the smallest k).
  ev.every = 0  # Steps between evaluations during training (0: none).
  ev.periodic_examples = 100  # Sentences decoded by those evaluations.
  ev.after_training = True  # The main job evaluates when training ends.
  # Draft analysis and refinement (Kim et al. 2024): python -m bpd_jax.drafts.
  config.drafts = dr = ml_collections.ConfigDict()
  dr.ks = (4, 8)  # Block sizes analysed, and compared plain vs refined.
  dr.num_examples = 50 if quick else 300  # First N eval sentences analysed and decoded (0: all).
  dr.batch_size = 1  # Sentences decoded together in the timed comparison.
  dr.repeats = 3  # Interleaved timed rounds; the median is reported.
  dr.top_ts = (1, 2, 3, 5, 10)  # t of the oracle top-t block efficiency.
  # Refinements compared with plain drafts: 'RESCORER:p=P,t=T,w=W', RESCORER
  # none (heads' scores alone), ngram or neural; p drafts verified per call,
  # t tokens per head, w the rescorer's weight (bpd_jax/drafts/checks.py).
  dr.refinements = ('none:p=4,t=2', 'ngram:p=1,t=4,w=0.2',
                    'ngram:p=4,t=4,w=0.2', 'neural:p=1,t=4,w=0.2')
  dr.corpus = 'targets'  # Rescorers' text: training targets, or a file (e.g. a distilled train.tgt).
  dr.corpus_limit = 0  # Sentences of it used (0: all).
  dr.ngram_order = 3  # n of the Kneser-Ney n-gram model.
  dr.lm_window = 8  # Output tokens the neural rescorer reads before a draft.
  dr.lm_d_model = 64  # Width of the neural rescorer (a decoder-only Transformer).
  dr.lm_layers = 2  # Its depth.
  dr.lm_steps = 100 if quick else 2000  # Its training steps (batch 256 windows).
  return config
