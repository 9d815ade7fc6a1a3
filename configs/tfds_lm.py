"""Kim et al.'s language tasks from TFDS: blockwise heads on a decoder-only LM.

Kim et al. 2024 (arXiv 2404.09221) analyse and refine blockwise drafts of
decoder-only language models with prediction heads on language modelling
(LM1B), summarisation (CNN/DailyMail, XSum) and question answering
(SQuAD v1.1). This config trains the same shape of model (a decoder-only
Transformer base, then its heads on the frozen base; prompt ->
continuation as bpd_jax/tasks/lm/tfds_lm.py formats each dataset) at a
size one machine trains; the paper's models are far larger, so compare
its trends (block efficiency by task, repetition, refinement gains), not
its figures. Sized for accelerators: 100k base steps, 20k head steps
(runlocal: under a minute on a CPU).

    dataset=NAME   lm1b (default), cnn_dailymail, xsum or squad
    data_dir=DIR   the TFDS data dir (default ~/tensorflow_datasets)
    heads=TYPE     the head layer (independent: the paper's; sequential,
                   joint, autoregressive, block)
    runlocal       a tiny model on TFDS mock data, a few steps: the whole
                   pipeline in under a minute on a CPU, no data needed

First, once, on a machine with the data:

    tfds build cnn_dailymail --data_dir=$DATA --file_format=array_record
    python -m bpd_jax.main --config=configs/tfds_lm.py:dataset=cnn_dailymail,data_dir=$DATA \
        --workdir=$RUNS/cnn_dailymail
    python -m bpd_jax.drafts --config=configs/tfds_lm.py:dataset=cnn_dailymail,data_dir=$DATA \
        --workdir=$RUNS/cnn_dailymail   # Kim et al.'s analysis and refinements

The report gives the validation perplexity and, for greedy and blockwise
decoding of the validation prompts, the mean accepted block, model calls,
wall-clock and identical_to_greedy. Guide: docs/guide/language_models.md;
no TFDS run has been measured here yet. Fields not set here keep
configs/base.py's value (documented there).
"""

from bpd_jax.infra import config_options
from bpd_jax.models import drafters

base = config_options.sibling(__file__, 'base')

# Per dataset: the evaluation split, prompt and continuation tokens at most
# (a language-modelling dataset's prompt: its first max_source_len tokens).
DATASETS = {
    'lm1b': dict(tfds='lm1b', eval_split='test', prompt=16, continuation=64),
    'cnn_dailymail': dict(tfds='cnn_dailymail', eval_split='validation',
                          prompt=512, continuation=96),
    'xsum': dict(tfds='xsum', eval_split='validation', prompt=512,
                 continuation=64),
    'squad': dict(tfds='squad/v1.1', eval_split='validation', prompt=384,
                  continuation=32),
}


def get_config(arg=None):
  options = config_options.parse(
      arg, dataset='lm1b', data_dir='~/tensorflow_datasets',
      heads='independent', runlocal=False)
  config_options.check_choice(options, 'dataset', tuple(DATASETS))
  config_options.check_choice(options, 'heads', drafters.NAMES)
  runlocal = options['runlocal']
  dataset = DATASETS[options['dataset']]
  prompt = 8 if runlocal else dataset['prompt']
  continuation = 16 if runlocal else dataset['continuation']
  config = base.get_config()

  task = config.task
  task.name = 'tfds_lm'  # Prompt -> continuation from TFDS.
  task.dataset = dataset['tfds']  # TFDS name (tasks/lm/tfds_lm.py FORMATS).
  task.data_dir = options['data_dir']  # Where `tfds build` prepared it.
  # Our split: the dataset's (LM1B has no validation split: its test).
  task.splits = dict(train='train', validation=dataset['eval_split'])
  task.max_source_len = prompt  # Prompt tokens at most (an LM's eval prompt).
  task.max_target_len = continuation  # Continuation tokens at most.
  task.train_limit = 0  # Training examples read (0: all).
  task.vocab_size = 64 if runlocal else 32_000  # SentencePiece pieces.
  task.vocab_sample = 0 if runlocal else 200_000  # Examples it learns from (0: all).
  task.vocab_path = ''  # An existing vocabulary ('': WORKDIR/vocab.model).
  task.mock_examples = 48 if runlocal else 0  # TFDS mock data (0: the real data).

  model = config.model
  model.size = 'tiny' if runlocal else 'base'  # d_model 512, 8 heads (base).
  model.num_encoder_layers = 0  # Decoder-only.
  model.num_decoder_layers = 1 if runlocal else 6  # Decoder depth.
  model.num_proposal_heads = 3 if runlocal else 8  # k heads.
  base.drafter(config, options['heads'])  # The drafter (configs/base.py).
  model.head_hidden = 32 if runlocal else 2048  # One head's hidden width.
  model.max_source_len = prompt + 1  # Input width: start token and prompt.
  # Positions: prompt + continuation in training, start token + prompt +
  # eval.max_len + k - 1 in decoding.
  model.max_target_len = prompt + continuation + 8

  train = config.train
  train.batch_size = 8 if runlocal else 64  # Examples a step.
  # Phase 'base': the LM; then phase 'heads' on the frozen base (runlocal:
  # one phase, the base and heads together, one compiled step).
  train.base_steps = 0 if runlocal else 100_000
  train.head_steps = 4 if runlocal else 20_000
  train.freeze_base = not runlocal  # The heads on a frozen base.
  train.label_smoothing = 0.0  # Perplexity is of the plain likelihood.
  train.warmup_steps = 1 if runlocal else 4_000  # Linear warm-up.
  train.log_every = 2 if runlocal else 500  # Steps between progress lines.
  train.checkpoint_every = 2 if runlocal else 5_000  # Steps between checkpoints.

  ev = config.eval
  ev.num_examples = 4 if runlocal else 500  # Prompts decoded (0: all).
  ev.max_len = 6 if runlocal else continuation  # Tokens generated a prompt.
  ev.ks = (3,) if runlocal else (2, 4, 6, 8)  # Block sizes compared with greedy.
  ev.criteria = ('exact',)  # Verification: exact returns greedy's output.
  # Draft analysis and refinement (Kim et al. 2024): python -m bpd_jax.drafts.
  config.drafts = base.drafts_config(num_examples=4 if runlocal else 300,
                                     lm_steps=10 if runlocal else 2000)
  if runlocal:
    config.drafts.ks = (3,)  # The block size analysed.
    config.drafts.top_ts = (1, 2)  # The oracle's t.
    config.drafts.repeats = 1  # One timed round.
  if drafters.dependent(options['heads']):
    # Refinement's lattice is of independent heads: the analysis only.
    config.drafts.refinements = ()
  return config
