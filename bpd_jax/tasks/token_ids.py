"""The token ids every task reserves: pad 0, eos 1, bos 2, unk 3.

Text vocabularies and image tokens share them (the defaults of
TransformerConfig), so batching, losses and decoding treat every task alike
and a model config needs only the vocabulary size.
"""

PAD_ID, EOS_ID, BOS_ID, UNK_ID = 0, 1, 2, 3
