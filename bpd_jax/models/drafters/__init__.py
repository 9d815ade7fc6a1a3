"""Drafters: what proposes heads 2..k after the base's head 1, one class a
method behind one protocol (`base.Drafter`), and their registry.

A new drafter is one file here (its class: parameters, training states,
decoding weights, draft, cache and partition rules) and one entry in
REGISTRY; `TransformerConfig.head_layer` names it.
"""

from bpd_jax.models.drafters import base
from bpd_jax.models.drafters.block import BlockDrafter, CorrectedBlockDrafter
from bpd_jax.models.drafters.draft_layer import AutoregressiveDrafter
from bpd_jax.models.drafters.paper_heads import IndependentHeads, JointHeads
from bpd_jax.models.drafters.sequential import SequentialHeads

# config.head_layer -> the drafter's class.
REGISTRY: dict[str, type[base.Drafter]] = {
    'independent': IndependentHeads,  # The paper's, one layer a head.
    'joint': JointHeads,  # The paper's layout: one shared hidden layer.
    'sequential': SequentialHeads,  # Each head reads the previous token.
    'autoregressive': AutoregressiveDrafter,  # A draft layer (EAGLE).
    'block': BlockDrafter,  # The whole block in one pass (DFlash).
    # The same, each proposal then corrected by the token before (DSpark).
    'block_corrected': CorrectedBlockDrafter,
}
NAMES = tuple(REGISTRY)

Drafter = base.Drafter
DecodeView = base.DecodeView
DraftSource = base.DraftSource
HeadWeights = base.HeadWeights
TrainingView = base.TrainingView
DRAFT_SOURCES = base.DRAFT_SOURCES


def get(name: str) -> type[base.Drafter]:
  """The drafter class config.head_layer names, or a ValueError listing
  them."""
  if name not in REGISTRY:
    raise ValueError(f'head_layer={name!r} is not one of {NAMES}.')
  return REGISTRY[name]


def dependent(name: str) -> str:
  """`name` if its heads read each other's proposals (drafts are made head
  after head; no lattice refinement), else ''."""
  return name if get(name).dependent else ''


def tensor_rules(name: str) -> tuple:
  """The 'tensor' rules of a drafter's parameters ('heads/...'), decoding
  weights ('proposals/...', 'scoring/...', one array a head under
  '.../N') and cache ('draft/...'): what `sharding` adds to its own for a
  model with this drafter."""
  drafter = get(name)
  rules = []
  for pattern, spec in drafter.tensor_rules:
    rules.append((f'heads/{pattern}', spec))
    rules.append((rf'(scoring|proposals)/{pattern}(/\d+)?', spec))
  rules.extend((f'draft/{pattern}', spec)
               for pattern, spec in drafter.cache_rules)
  return tuple(rules)
