"""The schema every experiment config shares, with its common defaults.

The experiment configs (demo, multi30k, wmt14_base, sr_demo, celeba_sr,
lm_demo, tfds_lm, hf_heads) start from `get_config()` and set what their experiment needs, each field
they set commented where they set it; a field they leave keeps the value
and the comment given here. The fields of one task (its `task` section
beyond name and max lengths), of image models and of the draft job are set
by the configs that use them; their modules document them (bpd_jax/tasks/,
models/transformer_config.py, `drafts_config` below).

Not a config to run: it names no task.
"""

import ml_collections
from ml_collections import config_dict

from bpd_jax.infra import config_options


def get_config():
  config = ml_collections.ConfigDict()
  config.seed = 0  # Seed of the weights, data order, dropout and head draws.

  config.task = task = ml_collections.ConfigDict()
  task.name = ''  # A registered task (bpd_jax/tasks/__init__.py).
  task.max_source_len = 0  # Longest training source, in tokens (eos too).
  task.max_target_len = 0  # Longest training target, in tokens (eos too).

  config.model = model = ml_collections.ConfigDict()
  model.size = 'tiny'  # Starting sizes (models/transformer_config.py SIZES).
  model.dropout_rate = 0.1  # Training only.
  model.max_source_len = 0  # Longest source the encoder takes (eval too).
  model.max_target_len = 0  # Decoder positions: eval.max_len + k must fit.
  model.num_proposal_heads = 8  # k heads; decoding may use any k up to this.
  # The base's pieces beyond its sizes (models/transformer_config.py); the
  # defaults are the paper's Transformer, an imported checkpoint sets its own.
  model.norm = 'layer'  # 'layer' (LayerNorm) or 'rms' (RMSNorm, Llama's).
  # 'plain' down(act(up(x))), or 'gated' down(act(gate(x)) * up(x)), which
  # is SwiGLU with model.activation = 'silu'.
  model.feed_forward = 'plain'
  # Key/value heads of each attention layer (grouped-query attention; 1:
  # multi-query); None: as many as model.num_heads.
  model.num_kv_heads = config_dict.placeholder(int)
  model.head_dim = config_dict.placeholder(int)  # None: d_model // num_heads.
  model.qkv_bias = True  # Biases on the query, key and value projections.
  model.out_bias = True  # A bias on the attention output projection.
  model.ffn_bias = True  # Biases on the feed-forward layers.
  model.rope_theta = 10_000.0  # Frequencies' base of positions='rotary'.
  # None, or a dict of models/rotary.py RopeScaling's fields (kind 'linear'
  # or 'llama3', factor, ...) that stretches the rotary frequencies.
  model.rope_scaling = config_dict.placeholder(dict)
  # The drafter of heads 2..k (bpd_jax/models/drafters/): the paper's
  # 'independent' heads or 'joint' layer, 'sequential' heads that read the
  # previous head's proposed token, an 'autoregressive' draft layer with
  # its own cache, or a 'block' drafter (the whole draft in one pass).
  model.head_layer = 'independent'
  # Hidden width of one head's layer (the draft layer's and the block
  # drafter's feed-forward layers).
  model.head_hidden = 256
  model.head1_from_base = True  # Head 1 is the base model's own output.
  # A drafter's view of an encoder-decoder's source: 'none', 'base'
  # (attends through the base's top decoder layer's source keys and
  # values) or 'own' (its own projection of the encoder output; the draft
  # layer's only).
  model.draft_source = 'none'
  # Lower decoder layers (0-based, below the top) whose outputs the draft
  # layer or the block drafter reads beside the top one (EAGLE-3,
  # DFlash); ().
  model.draft_feature_layers = ()
  model.block_layers = 1  # The block drafter's layers (1 to 64).
  # The corrected block drafter's correction also reads the corrected state
  # of the position before (a recurrence through the block); drafter()
  # below sets it for heads=block_corrected unless correction=token.
  model.correction_recurrent = False
  # The output: a softmax over the vocabulary (0), or a discretized logistic
  # mixture of this many components over an image task's ordered values
  # (models/mixture.py), whose lowest value has id mixture_first_id.
  model.mixture_components = 0
  model.mixture_first_id = 3  # After pad, eos, bos (tasks/images/tokens.py).

  config.train = train = ml_collections.ConfigDict()
  train.batch_size = 64  # Examples a step, over all devices.
  # Batches of about this many target tokens, bucketed by length (0: fixed
  # batches of batch_size examples padded to the task's max lengths).
  train.tokens_per_batch = 0
  # With tokens_per_batch: each bucket's padded length, strictly ascending,
  # the last at least the task's longest pair.
  train.bucket_lengths = ()
  train.base_steps = 1_000  # Phase 'base': the whole model, next token.
  train.head_steps = 1_000  # Phase 'heads': the heads (+ base if not frozen).
  train.freeze_base = True  # Heads on a frozen base (False: fine-tune all).
  train.head1_weight = 0.0  # Head 1's share of a fine-tuning loss (0: 1/k).
  # A fine-tuned base learns at this fraction of the heads' rate (the heads
  # are new, the base is trained); 1.0: one rate for all. Frozen base: 1.0.
  train.base_learning_rate_scale = 1.0
  train.random_head = False  # One random head a step (True) or the mean of all.
  # Heads after head 1 learn from this fraction of each row's positions, a
  # new sample each step (losses.heads_loss): their layers and vocabulary
  # projections are most of a heads step's cost. 1: every position.
  train.head_position_fraction = 1.0
  # The heads after head 1 weigh exp(-(i - 2) / decay) in the loss, head i
  # (a draft is accepted up to its first miss, so its early heads count
  # most); 0: the same.
  train.head_loss_decay = 0.0
  # Each head's loss at a position weighed by the drafter's own probability
  # (no gradient) of having drafted the heads before it right there: how
  # likely verification reaches it (a loss on acceptance). Not with
  # random_head.
  train.acceptance_weighted = False
  # What heads 2..k learn: 'data' (the true tokens) or 'base' (the base's
  # own next-token distribution there: what verification accepts).
  train.head_targets = 'data'
  # What sequential heads and the draft layer read as the drafts before
  # theirs: 'data' (the true tokens) or 'own' (their own drafts, as when
  # decoding: the training-time test).
  train.draft_inputs = 'data'
  # Share of the decoder's target inputs replaced by the model's own
  # prediction there (argmax of a first pass, no gradient): it learns to
  # read what it will read when decoding (parallel scheduled sampling).
  # 0: the data's tokens only.
  train.scheduled_sampling = 0.0
  # Share of the decoder's previous target tokens hidden in training (an
  # image model then reads its input image, not its last intensity).
  train.input_dropout = 0.0
  train.init_from = ''  # Workdir of a trained base to start the heads from.
  # Start the heads from init_from's trained heads too (its head layer and
  # k): a drafter trained on the frozen base, then fine-tuned with it.
  # False: new heads.
  train.init_heads = False
  train.learning_rate = 1e-3  # Peak learning rate, reached after warm-up.
  train.warmup_steps = 500  # Linear warm-up, then the schedule's decay.
  # After the warm-up: 'rsqrt' (the paper's 1/sqrt(step) decay) or 'linear'
  # (to zero at the end of each phase; better for short runs of known length,
  # but a run resumed with more steps then follows other rates).
  train.schedule = 'rsqrt'
  train.label_smoothing = 0.1  # As in the paper.
  train.clip_norm = 1.0  # Global gradient norm clip (0: none).
  train.grad_accum_steps = 1  # Micro-batches accumulated per update.
  train.log_every = 250  # Steps between progress lines.
  train.checkpoint_every = 1_000  # Steps between checkpoints (and at phase ends).
  train.keep_checkpoints = 2  # Newest checkpoints kept.
  # Read checkpoint steps that have no checksums (an older version wrote
  # them) unverified; False: such a step counts as damaged (jobs fall back).
  train.read_unverified = False

  config.mesh = mesh = ml_collections.ConfigDict()
  mesh.shape = (-1,)  # Devices per mesh axis; -1: all the remaining ones.
  mesh.axes = ('data',)  # Mesh axis names.
  mesh.data_axis = 'data'  # The axis the batch is split along.
  # How parameters (and the decoding cache) are split over the mesh
  # (bpd_jax/infra/sharding.py): () replicated; 'tensor' Megatron-style
  # over a 'model' axis (attention heads, feed-forward hidden units, the
  # vocabulary; the cache by key/value head; a dimension that does not
  # divide stays whole, said in one log line), e.g. mesh.shape=(2, 4),
  # mesh.axes=('data', 'model'); 'fsdp' each parameter along its largest
  # dimension over the 'data' axis; or (regex on the parameter's path,
  # spec) pairs, e.g. (('.*/ffn/up/kernel', (None, 'model')),), a spec
  # starting with ... naming the last dimensions. A field of any type
  # (a name or pairs), so that both parse from the command line.
  mesh.param_rules = ml_collections.FieldReference((), field_type=object)

  config.eval = ev = ml_collections.ConfigDict()
  ev.split = 'validation'  # Split decoded by evaluation.
  ev.num_examples = 0  # First N examples (0: all).
  ev.batch_size = 1  # Examples decoded together (1: latency, as the paper).
  # Timed rounds of every decoder over the split, interleaved so that they
  # share the machine's drifts; a decoder's wall_s is its median round.
  ev.repeats = 3
  ev.max_len = 0  # Most tokens generated per example.
  ev.ks = (2, 4, 6, 8)  # Blockwise block sizes compared with greedy.
  # Verification criteria, each at every k: 'exact', 'top-k:T' or
  # 'distance:EPS' (decoding/criteria.py).
  ev.criteria = ('exact',)
  ev.min_block = 1  # Fewest tokens accepted per call (<= the smallest k).
  # Proposals chosen among this many most frequent ids of the training
  # targets (FR-Spec's drafting vocabulary: a cheaper projection per draft,
  # the same output); 0: the whole vocabulary (bpd_jax/draft_vocab.py).
  ev.draft_vocab_size = 0
  # Sampled decoders (text tasks), each 'temperature=T[,top_k=K][,top_p=P]':
  # ancestral sampling, then blockwise sampling at every k with the
  # 'exact' criterion (the rejection rule: the base model's distribution)
  # and any 'typical:EPS,DELTA' one, each timed against that ancestral row.
  ev.samplers = ()
  # Language models: perplexity over the eval split's first this many
  # continuation tokens, the last example cut at the budget (0: the whole
  # split). Above configs/lm_demo.py's whole validation split (202,707
  # tokens); a larger split (LM1B's test) is cut. A 1B model on a CPU
  # scores tens of tokens a second (~2.5 GFLOP each): lower it there.
  ev.perplexity_tokens = 262_144
  # Drafters that need no training, each a row at every k with exact
  # verification: 'lookup' (prompt lookup) or 'ngram' (an n-gram model's
  # greedy continuation, from eval.ngram_path), with options, e.g.
  # 'lookup:max=4,min=2,heads=tree' (bpd_jax/decoding/lookup.py).
  ev.drafters = ()
  # The n-gram model 'ngram' drafters read: the drafts job's ngram.npz.
  ev.ngram_path = ''
  # Trees of drafts verified in one call, each a row at every k deep
  # enough for it with exact verification, and the static ones under each
  # of eval.samplers: widths per depth ('2,2': the top 2 tokens at depths 1
  # and 2, the argmax below) or 'dynamic:N[,top=T,frontier=W,temperature=S]'
  # (N nodes made each call from the drafter's confidence;
  # bpd_jax/decoding/tree.py).
  ev.trees = ()
  ev.tokenized_bleu = False  # Text tasks: also bleu_intl (t2t-bleu's).
  ev.every = 0  # Steps between evaluations during training (0: none).
  ev.periodic_examples = 100  # Examples decoded by those evaluations.
  ev.after_training = True  # The main job evaluates when training ends.
  return config


def drafts_config(num_examples: int, lm_steps: int):
  """The draft job's section (python -m bpd_jax.drafts, Kim et al. 2024).

  Args:
    num_examples: first N eval sentences analysed and decoded (0: all).
    lm_steps: training steps of the neural rescorer (batch 256 windows).
  """
  dr = ml_collections.ConfigDict()
  dr.ks = (4, 8)  # Block sizes analysed, and compared plain vs refined.
  dr.num_examples = num_examples  # First N eval sentences analysed and decoded (0: all).
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
  dr.lm_steps = lm_steps  # Its training steps (batch 256 windows).
  return dr


CORRECTIONS = ('token', 'recurrent')


def drafter(config, heads: str, features: str = '', block_layers: int = 1,
            correction: str = ''):
  """The model and train fields of a drafter option, as an experiment
  config's `heads=`, `features=`, `block_layers=` and `correction=` set
  them.

  Args:
    config: the config, its model section's num_decoder_layers and
      num_proposal_heads set.
    heads: model.head_layer (bpd_jax/models/drafters/ REGISTRY).
    features: the lower decoder layers the draft layer or the block
      drafter reads beside the top one, joined by '+' ('0+2'); '' the top
      alone, except for the block drafter: its shallowest layer and the
      one halfway up (DFlash reads the base from shallow to deep); 'top'
      the top alone.
    block_layers: the block drafter's layers.
    correction: the corrected block drafter's correction reads the
      proposal before each head and the corrected state before it
      ('recurrent') or the proposal alone ('token'); '' recurrent, which
      drafts more tokens per call at the same call cost.
  """
  if correction:
    config_options.check_choice(dict(correction=correction), 'correction',
                                CORRECTIONS)
    if heads != 'block_corrected':
      raise ValueError(f'config option correction={correction!r} is the '
                       f'corrected block drafter\'s: give '
                       f'heads=block_corrected (heads={heads!r}).')
  model, train = config.model, config.train
  model.head_layer = heads  # See get_config().
  below_top = model.num_decoder_layers - 1
  if features == 'top':
    layers = ()
  elif features or heads not in ('block', 'block_corrected'):
    layers = config_options.layers(features)
  else:  # Shallow and middle (the top is always read).
    layers = tuple(sorted({0, (below_top - 1) // 2} & set(range(below_top))))
  model.draft_feature_layers = layers  # See get_config().
  model.block_layers = block_layers  # See get_config().
  model.correction_recurrent = (  # See get_config().
      heads == 'block_corrected' and correction != 'token')
  if heads in ('block', 'block_corrected'):
    # A block at half of each row's positions, its heads weighing less
    # with their distance (a draft is accepted up to its first miss;
    # DFlash's decay, k / 2).
    train.head_position_fraction = 0.5
    train.head_loss_decay = model.num_proposal_heads / 2
