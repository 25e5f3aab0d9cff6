"""A stand-in for scikit-image (not installed): yassouali/pytorch-segmentation's
utils/transforms.py imports `from skimage.filters import gaussian` at module level for a
RandomGaussianBlur transform that train.py never builds. Names only."""
