"""GPT-2 ids <-> project ids: <|endoftext|> is eos, the rest in order from
4 on, wherever <|endoftext|> sits."""

import numpy as np
import pytest

from bpd_jax.infra import gpt2_ids
from bpd_jax.infra import token_ids


@pytest.mark.parametrize('endoftext', [0, 3, 9])  # GPT-2's: the last.
def test_a_bijection_onto_all_but_pad_bos_unk(endoftext):
  size = 10
  project = gpt2_ids.from_gpt2(np.arange(size), endoftext)
  assert project[endoftext] == token_ids.EOS_ID
  others = np.delete(project, endoftext)
  np.testing.assert_array_equal(others, np.arange(4, size + 3))
  assert gpt2_ids.vocab_size(size) == size + 3
  assert sorted(project.tolist() + list(gpt2_ids.UNUSED_IDS)) == list(
      range(gpt2_ids.vocab_size(size)))
  np.testing.assert_array_equal(gpt2_ids.to_gpt2(project, endoftext),
                                np.arange(size))


def test_gpt2s_own_layout():
  endoftext = 50256
  np.testing.assert_array_equal(
      gpt2_ids.from_gpt2([[0, 1], [50255, 50256]], endoftext),
      [[4, 5], [50259, 1]])


@pytest.mark.parametrize('project_id', [0, 2, 3, -1])
def test_ids_of_no_gpt2_token_are_rejected(project_id):
  with pytest.raises(ValueError, match=f'project id {project_id} stands for '
                     'no GPT-2 token'):
    gpt2_ids.to_gpt2([5, project_id], 9)


def test_negative_gpt2_id_is_rejected():
  with pytest.raises(ValueError, match='GPT-2 id -2 is negative'):
    gpt2_ids.from_gpt2([1, -2], 9)
