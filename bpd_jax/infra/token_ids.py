"""The token ids every project vocabulary reserves: pad 0, eos 1, bos 2, unk 3.

Text vocabularies and image tokens share them, and they are the defaults of
TransformerConfig, so batching, losses and decoding treat every task alike
and a model config needs only the vocabulary size. An imported checkpoint's
ids are mapped onto them (gpt2_ids.py).

They live in infra/, the layer both tasks/ (the vocabularies) and models/
(the importers) build on, so that neither imports the other for them.
"""

PAD_ID, EOS_ID, BOS_ID, UNK_ID = 0, 1, 2, 3
