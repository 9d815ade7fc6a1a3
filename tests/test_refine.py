"""Refinement options: the tree of a refinement's drafts keeps within the
trees' node budget."""

import pytest

from bpd_jax.decoding import DecodeOptions, Refinement, tree as tree_lib

BUDGET = tree_lib.MAX_NODES


def test_a_refinements_tree_is_refused_beyond_the_node_budget():
  # 1 + 100 x 3 nodes at k=4: refused before anything is compiled.
  options = DecodeOptions(max_len=8, k=4,
                          refinement=Refinement(drafts=100, top_t=5))
  with pytest.raises(ValueError, match=rf'drafts=100 at k=4: a tree of 301 '
                     rf'nodes \(root included\) exceeds the budget of '
                     rf'{BUDGET} nodes\. Cap it with nodes \(n\) <= {BUDGET}'):
    options.check(num_heads=4, vocab_size=100)
  # Capped by n, the same drafts fit.
  capped = Refinement(drafts=100, top_t=5, nodes=BUDGET)
  DecodeOptions(max_len=8, k=4, refinement=capped).check(4, 100)
  assert capped.tree_size(4) == BUDGET
  with pytest.raises(ValueError, match=rf'refinement nodes={BUDGET + 1}: a '
                     rf'tree of {BUDGET + 1} nodes'):
    Refinement(drafts=100, top_t=5, nodes=BUDGET + 1)
  with pytest.raises(ValueError, match='exceeds the budget'):
    Refinement.from_spec(f'none:p=100,t=5,n={BUDGET + 1}')
