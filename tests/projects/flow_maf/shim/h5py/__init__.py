"""A fake h5py (not installed here): imported by datasets/bsds300.py, which
datasets/__init__.py imports with every other data set; BSDS300 is never built here."""
