"""The token ids every project vocabulary reserves: pad 0, eos 1, bos 2, unk 3.

The project's text vocabularies and image tokens share them, and they are
the defaults of TransformerConfig, so a model config of the project's own
tasks needs only the vocabulary size. An imported checkpoint keeps its own
ids (tasks/text/hf_vocab.py, models/imports/): every vocabulary names its
ids (pad_id, eos_id, bos_id), which the tasks and batching use, and a job
checks that the model's are the same.

They live in infra/, the bottom layer, so that tasks/ (the vocabularies,
image tokens) and the layers above share them without importing a task.
"""

PAD_ID, EOS_ID, BOS_ID, UNK_ID = 0, 1, 2, 3
