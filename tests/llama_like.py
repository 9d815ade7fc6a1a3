"""TransformerConfig fields of tiny bases with the Llama family's pieces,
shared by the model and decoding tests: RMSNorm, rotary positions with
Llama 3's scaling, a gated SiLU feed-forward layer, 4 query heads over 2
key/value heads of a width (8) other than d_model / heads, no biases; and
Qwen2's variant, with query/key/value biases and plain rotary positions.
With d_model 16, rope_theta 500 and a context of 8 before scaling, the
scaling divides some frequencies and blends another."""

from bpd_jax.models import RopeScaling

LLAMA = dict(norm='rms', positions='rotary', rope_theta=500.0,
             rope_scaling=RopeScaling('llama3', 4.0,
                                      original_max_positions=8),
             feed_forward='gated', activation='silu', num_heads=4,
             num_kv_heads=2, head_dim=8, qkv_bias=False, out_bias=False,
             ffn_bias=False, scale_embeddings=False, layer_norm_epsilon=1e-5)
QWEN2 = {**LLAMA, 'rope_scaling': None, 'qkv_bias': True}
# Named bases of the parametrized tests: the project's own Transformer
# ('paper', the config's defaults) and the two above.
ARCHITECTURES = {'paper': {}, 'llama': LLAMA, 'qwen2': QWEN2}
