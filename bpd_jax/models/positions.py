"""Position encodings: sinusoidal, learned, and image raster codes.

A Transformer adds one of these to its token embeddings (its config's
`positions`), or none with 'rotary' (models/rotary.py: its attention
rotates queries and keys by their positions instead):
- 'sinusoidal': Vaswani et al.'s sine/cosine encodings (`sinusoidal`).
- 'learned': a learned table per side (the model holds the embeddings).
- 'image': sequences are images in raster order (row, column, channel),
  and a position is encoded by where its pixel lies in the image
  (`raster_codes`) plus a learned channel embedding, so that encoder and
  decoder positions over the same spot of a low- and a high-resolution
  image get matching codes. `ImagePositions` describes the images, and its
  optional input skip (`source_under`) adds to each decoder position the
  input intensity under its output pixel.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp

from bpd_jax.infra import numeric

POSITIONS = ('sinusoidal', 'learned', 'image', 'rotary')
# ml_collections `model` fields (configs/sr_demo.py, celeba_sr.py) -> the
# ImagePositions fields they set.
CONFIG_FIELDS = {'source_image_side': 'source_side',
                 'target_image_side': 'target_side',
                 'image_channels': 'channels',
                 'image_source_skip': 'source_skip'}


@dataclasses.dataclass(frozen=True)
class ImagePositions:
  """The images of positions='image' (TransformerConfig.image).

  Attributes:
    source_side: side of the (square) source image; decoder-only models
      leave it 0.
    target_side: side of the target image; decoder position p is the
      position that predicts pixel intensity p of the target.
    channels: intensities per pixel.
    source_skip: the decoder input at each position also gets an embedding
      of the input image's intensity under that output pixel (same
      channel): the low-resolution image upsampled by nearest neighbour.
      The paper's model conditions through cross-attention alone; this
      shortcut lets a small model on a CPU learn super-resolution in
      minutes rather than days.
  """
  source_side: int = 0
  target_side: int = 0
  channels: int = 3
  source_skip: bool = False

  def problems(self, encoder_decoder: bool, d_model: int) -> list[str]:
    """What is wrong with these images for a model of that shape."""
    sides = {'source_side': self.source_side} if encoder_decoder else {}
    sides.update(target_side=self.target_side, channels=self.channels)
    found = [f'image.{name}={value!r} must be an integer >= 1.'
             for name, value in sides.items()
             if not numeric.is_integer(value) or value < 1]
    if d_model % 4:
      found.append(f'd_model={d_model} must be a multiple of 4 with '
                   f'positions=\'image\' (row and column codes of '
                   f'd_model / 2).')
    if self.source_skip and not encoder_decoder:
      found.append('image.source_skip needs an encoder '
                   '(num_encoder_layers > 0).')
    return found

  @classmethod
  def pop_from(cls, model_fields: dict) -> 'ImagePositions | None':
    """The images a config's flat `model` fields describe, removed from it.

    Args:
      model_fields: dict(config.model); its CONFIG_FIELDS keys are popped.

    Returns:
      ImagePositions when model_fields['positions'] is 'image', else None
      (the image fields, if any, are then ignored).
    """
    given = {field: model_fields.pop(key)
             for key, field in CONFIG_FIELDS.items() if key in model_fields}
    if model_fields.get('positions') != 'image':
      return None
    return cls(**given)


def sinusoidal(positions: jax.Array, width: int,
               dtype=jnp.float32) -> jax.Array:
  """[..., width] sine/cosine encodings (Vaswani et al.) of positions.

  Positions are usually ints; `raster_codes` passes float coordinates.
  """
  half = width // 2
  rates = jnp.exp(-math.log(10_000.0) * jnp.arange(half, dtype=dtype)
                  / max(half - 1, 1))
  angles = positions[..., None].astype(dtype) * rates
  enc = jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)
  return jnp.pad(enc, [(0, 0)] * positions.ndim + [(0, width - 2 * half)])


def raster_codes(positions: jax.Array, side: int, channels: int,
                 width: int, dtype=jnp.float32) -> jax.Array:
  """[..., width] codes of raster positions by their pixel's place.

  Position p is pixel p // channels of a side x side image, at row r and
  column c. Its code is the sinusoidal encoding of the pixel centre's row
  coordinate (r + 0.5) * 64 / side in the first half of the width, and of
  its column coordinate in the second half: coordinates in units of 1/64 of
  the image, whatever its resolution, so the centre of an 8x8 input pixel
  and the centres of the 4x4 output pixels over it get near codes. The
  channel is left to a learned embedding (the model adds it). Positions
  past the image (a decoder's padding) continue the rows below it.
  """
  pixel = positions // channels
  scale = 64.0 / side
  row = (pixel // side).astype(dtype) + 0.5
  column = (pixel % side).astype(dtype) + 0.5
  half = width // 2
  return jnp.concatenate(
      [sinusoidal(row * scale, half, dtype),
       sinusoidal(column * scale, half, dtype)], axis=-1)


def source_under(positions: jax.Array, image: ImagePositions) -> jax.Array:
  """Source positions of the input intensity under each output position.

  Output position p predicts intensity p of the target image (pixel
  p // channels, channel p % channels); the source position holds the
  same channel of the input pixel that covers it. Positions past the
  target image (decoding padding) take its last row.

  Args:
    positions: [...] decoder positions.
    image: the source and target images.

  Returns:
    [...] source positions.
  """
  channels, high, low = image.channels, image.target_side, image.source_side
  pixel = positions // channels
  row = jnp.minimum(pixel // high, high - 1) * low // high
  column = pixel % high * low // high
  return (row * low + column) * channels + positions % channels
