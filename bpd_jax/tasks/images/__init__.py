"""Image tasks: super-resolution, low-resolution inputs to high-resolution
targets, images written as intensity tokens.

- tokens.py: images <-> token ids, area downsampling.
- task.py: the ImageTask the image tasks load, and their shared checks.
- embedded_photos.py: the 'embedded_images' task (photos shipped with
  scikit-image and matplotlib, no download).
- tfds_images.py: the 'tfds_images' task (CelebA through TFDS).
"""
