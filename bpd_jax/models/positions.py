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
  input intensity under its output pixel; its optional input window
  (`source_window_values`, `subpixel_phase`) the input neighbourhood
  around that pixel and where in the input pixel the output pixel sits.
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
                 'image_source_skip': 'source_skip',
                 'image_source_window': 'source_window'}


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
    source_window: side (odd) of the input neighbourhood each decoder
      input also reads, 0 for none: the window x window input pixels
      centred on the one under the output pixel (every channel; edges
      repeated), projected to the model's width, plus an embedding of the
      output pixel's sub-pixel phase (where it sits inside that input
      pixel). What an interpolation filter reads: the detail bicubic
      misses is a function of the neighbourhood and the phase, which
      cross-attention alone takes a small model long to learn.
  """
  source_side: int = 0
  target_side: int = 0
  channels: int = 3
  source_skip: bool = False
  source_window: int = 0

  @property
  def reads_source(self) -> bool:
    """Whether the decoder input reads source tokens (skip or window)."""
    return self.source_skip or self.source_window > 0

  @property
  def upscale(self) -> int:
    """Output pixels per input pixel along a side."""
    return self.target_side // self.source_side

  @property
  def window_width(self) -> int:
    """Values the input window gives a decoder position."""
    return self.source_window ** 2 * self.channels

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
    window = self.source_window
    if not numeric.is_integer(window) or window < 0 or (
        window and window % 2 == 0):
      found.append(f'image.source_window={window!r} must be 0 or an odd '
                   f'integer >= 1 (a window centred on the input pixel).')
    elif window and not encoder_decoder:
      found.append('image.source_window needs an encoder '
                   '(num_encoder_layers > 0).')
    elif window and self.source_side >= 1 and (
        self.target_side % self.source_side):
      found.append(f'image.source_window needs target_side '
                   f'({self.target_side}) a multiple of source_side '
                   f'({self.source_side}): one sub-pixel phase per output '
                   f'pixel.')
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
  row, column = _source_pixel(positions, image)
  return ((row * image.source_side + column) * image.channels
          + positions % image.channels)


def _target_pixel(positions: jax.Array, image: ImagePositions):
  """(row, column) of each output position's pixel; positions past the
  target image take its last row."""
  pixel = positions // image.channels
  high = image.target_side
  return jnp.minimum(pixel // high, high - 1), pixel % high


def _source_pixel(positions: jax.Array, image: ImagePositions):
  """(row, column) of the input pixel under each output position's."""
  high, low = image.target_side, image.source_side
  row, column = _target_pixel(positions, image)
  return row * low // high, column * low // high


def source_window_values(source: jax.Array, positions: jax.Array,
                         image: ImagePositions) -> jax.Array:
  """The input neighbourhood around each output position's input pixel.

  Args:
    source: [batch, source_side**2 * channels] source ids in raster order;
      read as numbers (id / 128 - 1): an intensity's id is the intensity
      plus a fixed offset, which the projection's bias absorbs.
    positions: [batch, n] decoder positions.
    image: the source and target images (source_window > 0).

  Returns:
    [batch, n, window_width] float32: for each of the window's rows, then
    columns, then channels, the value at that input pixel (the nearest
    edge pixel outside the image).
  """
  low, window = image.source_side, image.source_window
  row, column = _source_pixel(positions, image)
  offsets = jnp.arange(window) - window // 2
  rows = jnp.clip(row[..., None] + offsets, 0, low - 1)       # [b, n, w]
  columns = jnp.clip(column[..., None] + offsets, 0, low - 1)
  pixels = rows[..., :, None] * low + columns[..., None, :]   # [b, n, w, w]
  index = (pixels[..., None] * image.channels
           + jnp.arange(image.channels))                      # [..., C]
  batch, n = positions.shape
  values = jnp.take_along_axis(source, index.reshape(batch, -1), axis=1)
  return values.reshape(batch, n, image.window_width).astype(
      jnp.float32) / 128.0 - 1.0


def subpixel_phase(positions: jax.Array, image: ImagePositions) -> jax.Array:
  """[...] index in [0, upscale**2) of where each output position's pixel
  sits inside its input pixel (row-major)."""
  row, column = _target_pixel(positions, image)
  return row % image.upscale * image.upscale + column % image.upscale
