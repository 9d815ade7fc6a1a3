"""WMT14 English->German, Transformer base: the paper's translation runs.

Stern, Shazeer and Uszkoreit 2018, Sections 6-7, Tables 1 and 4: a base
trained on WMT14 En->De (TFDS `wmt14_translate/de-en`, 32k shared
SentencePiece vocabulary), then k proposal heads on it; greedy and blockwise
decoding compared on newstest2014 (our eval split 'test'; 'validation' is
newstest2013) at batch size 1. Every row is an option of this one config:

    k=K              proposal heads (1: the base model; the paper: 2..10)
    base=finetuned   fine-tune the whole model with the heads (default
                     frozen: the base stays bit-identical, the paper's
                     "regular" rows)
    distilled=DIR    train on a distilled corpus (python -m bpd_jax.distill
                     writes DIR/train.src/.tgt and copies the eval splits)
    criterion=top-2  approximate verification (exact, top-2, top-3)
    min_block=L      accept at least L tokens per call (1..k)
    init_from=DIR    train only the heads, on the base of the run in DIR
                     (base_steps=0; its vocabulary is reused)
    data_dir=DIR     the TFDS data dir (default ~/tensorflow_datasets)
    runlocal         a tiny model on TFDS mock data: any row in about a
                     minute on a CPU, no data needed (checks the setup)

Launch (one process per host; launch/ has the TPU-pod, GPU-cluster and
sweep scripts). First, once, on a machine with the data:

    tfds build wmt14_translate/de-en --data_dir=$DATA --file_format=array_record

The base (k=1), then each row on it:

    python -m bpd_jax.main --config=configs/wmt14_base.py:data_dir=$DATA \
        --workdir=$RUNS/base
    python -m bpd_jax.main --config=configs/wmt14_base.py:data_dir=$DATA,k=8,init_from=$RUNS/base \
        --workdir=$RUNS/k8_frozen
    python -m bpd_jax.main --config=configs/wmt14_base.py:data_dir=$DATA,k=8,base=finetuned,init_from=$RUNS/base \
        --workdir=$RUNS/k8_finetuned
    python -m bpd_jax.evaluate --config=configs/wmt14_base.py:data_dir=$DATA,k=8,criterion=top-2,init_from=$RUNS/base \
        --workdir=$RUNS/k8_frozen      # approximate verification: decode only
    launch/sweep.py --config=configs/wmt14_base.py --workdir=$RUNS \
        --grid='k=2,4,6,8,10 base=frozen,finetuned' --fixed='data_dir=$DATA,init_from=$RUNS/base'

Sized for accelerators: 100k base steps and 100k head steps of ~32k
tokens (runlocal: a minute on a CPU). The report (WORKDIR/eval_test.json,
and the table printed) gives BLEU (sacreBLEU on detokenized output, with
its signature), bleu_intl (tokenized BLEU as t2t-bleu computes it, the
paper's convention) and the mean accepted block size for greedy and
blockwise decoding. Exact verification keeps the greedy output, so every
exact row's BLEU is its base model's (head 1 is the base's own output).

Training as the paper: Transformer base (6+6 layers, d_model 512, d_ff 2048,
8 attention heads, dropout 0.1, label smoothing 0.1), Adam (0.9, 0.98,
1e-9) with warm-up 4,000 and 1/sqrt decay peaking at 512^-0.5 * 4000^-0.5
= 7e-4, batches of ~32k tokens (tensor2tensor's 4,096 per GPU on 8 GPUs),
the joint head layer, one random head's loss per step. Step counts (100k
base, 100k heads) are our choice; the paper's: 1,000,000 base steps on 8
P100 GPUs, then 1,000,000 for each head model.

What each row should reproduce (the paper's Table 1 and 4, read from its
text) and how to launch: docs/guide/paper.md; no WMT14 run has been
measured here yet. Fields not set here keep configs/base.py's value
(documented there).
"""

from bpd_jax.infra import config_options
from bpd_jax.infra import workdir

base = config_options.sibling(__file__, 'base')

BASES = ('frozen', 'finetuned')
CRITERIA = {'exact': 'exact', 'top-2': 'top-k:2', 'top-3': 'top-k:3'}


def get_config(arg=None):
  options = config_options.parse(
      arg, k=1, base='frozen', distilled='', criterion='exact', min_block=1,
      init_from='', data_dir='~/tensorflow_datasets', runlocal=False)
  k, local = options['k'], options['runlocal']
  if k < 1:
    raise ValueError(f'config option k={k} must be >= 1.')
  config_options.check_choice(options, 'base', BASES)
  config_options.check_choice(options, 'criterion', CRITERIA)
  if not 1 <= options['min_block'] <= k:
    raise ValueError(f'config option min_block={options["min_block"]} must '
                     f'be in [1, k={k}].')
  init_from = options['init_from']
  if init_from and k == 1:
    raise ValueError('config option init_from trains heads on a base: it '
                     'needs k >= 2.')
  config = base.get_config()

  task = config.task
  task.name = 'tfds_translation'  # A TFDS translation dataset.
  task.dataset = 'wmt14_translate/de-en'  # TFDS name/config.
  task.data_dir = options['data_dir']  # Where `tfds build` prepared it.
  task.source_lang = 'en'  # Source feature.
  task.target_lang = 'de'  # Target feature.
  # Our split: the dataset's. validation is newstest2013, test newstest2014.
  task.splits = dict(train='train', validation='validation', test='test')
  task.vocab_size = 96 if local else 32_000  # Shared SentencePiece pieces.
  task.vocab_sample = 200 if local else 500_000  # Pairs it is trained on.
  # An existing vocabulary (the base run's when init_from is set); '':
  # WORKDIR/vocab.model, trained on the first run.
  task.vocab_path = workdir.run_vocabulary(init_from) if init_from else ''
  task.mock_examples = 64 if local else 0  # > 0: TFDS mock data, no data dir.
  task.max_source_len = 32 if local else 256  # Longer training pairs dropped.
  task.max_target_len = 32 if local else 256  # (pieces, eos included).
  if options['distilled']:
    task.name = 'parallel_text'  # Written by bpd_jax.distill.
    task.data_dir = options['distilled']  # Where {split}.src / .tgt lie.
    task.source_lang = 'src'  # Source file suffix.
    task.target_lang = 'tgt'  # Target file suffix.
    task.train_limit = 0  # Read at most this many training pairs (0: all).
    task.vocab_type = 'sentencepiece'  # Subwords.
    del task.dataset, task.mock_examples

  model = config.model
  model.size = 'tiny' if local else 'base'  # transformer_config.SIZES.
  model.max_source_len = task.max_source_len  # Eval sources are cut to it.
  model.max_target_len = (32 if local else 256) + 10  # eval.max_len + k <= it.
  model.num_proposal_heads = k  # k heads (1: the base model alone).
  model.head_layer = 'joint'  # The paper's: one layer of k * head_hidden.
  model.head_hidden = 64 if local else 2048  # Per head: the paper's d_ff.

  train = config.train
  train.batch_size = 1  # Unused: tokens_per_batch sets the batches.
  train.tokens_per_batch = 512 if local else 32_768  # Global, by bucket.
  # Bucket lengths (pieces): a batch pads to its bucket's length.
  train.bucket_lengths = ((16, 32) if local else
                          (8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256))
  train.base_steps = 0 if init_from else (6 if local else 100_000)
  train.head_steps = 0 if k == 1 else (4 if local else 100_000)
  train.freeze_base = options['base'] == 'frozen'  # False: fine-tune all.
  train.random_head = True  # The paper: one random head's loss a step.
  train.init_from = init_from  # Workdir of the trained base ('': train it).
  train.learning_rate = 7e-4  # Peak: 512^-0.5 * 4000^-0.5.
  train.warmup_steps = 4 if local else 4_000  # Then 1/sqrt(step) decay.
  train.clip_norm = 0.0  # Global gradient norm clip (0: none, as T2T).
  train.log_every = 2 if local else 500  # Steps between progress lines.
  train.checkpoint_every = 5 if local else 5_000  # Steps between saves.
  train.keep_checkpoints = 3  # Newest checkpoints kept.

  ev = config.eval
  ev.split = 'test'  # newstest2014.
  ev.num_examples = 4 if local else 0  # First N sentences (0: all 3,003).
  ev.max_len = 32 if local else 256  # Most pieces generated per sentence.
  ev.ks = (k,) if k > 1 else ()  # Blockwise block sizes beside greedy.
  ev.criteria = (CRITERIA[options['criterion']],)  # Verification.
  ev.min_block = options['min_block']  # Fewest tokens accepted per call.
  ev.tokenized_bleu = True  # Also print bleu_intl (t2t-bleu's convention).
  return config
