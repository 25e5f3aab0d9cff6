"""A fake SciPy for pygcn (scipy is not installed here): only `scipy.sparse`, and of it
only what pygcn/utils.py calls (see sparse.py)."""
