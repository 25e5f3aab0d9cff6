"""A fake Pillow for the projects' shim: images are numpy arrays (no file formats).

Only what the corpus projects and the fake torchvision use: `Image.open` (reads the
numpy files the harness writes, whatever their extension), `Image.fromarray`, `size`,
`mode`, `convert` ('L', 'RGB', 'YCbCr'), `split`, `copy`, `crop`, `resize` (nearest
neighbour whatever the filter), `save` (numpy format) and `numpy.asarray(image)`.
"""

__version__ = "0.0.0+distrun.shim"   # scripts print it (DomainBed's train.py)
