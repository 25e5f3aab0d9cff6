"""A fake `scipy.sparse`, backed by dense numpy arrays: the few operations of pygcn's
utils.py (load_data, normalize, sparse_mx_to_torch_sparse_tensor) and pyGAT's (the same
load_data, `transpose()` in normalize_adj) on graphs of a few thousand nodes.
`coo_matrix((data, (row, col)))` sums duplicate entries as SciPy does; `tocoo()` lists the
non-zero entries in row-major order (`row`, `col`, `data`)."""

from __future__ import annotations

import numpy as np


class _Matrix:
    def __init__(self, array, dtype=None):
        array = np.asarray(array)
        self.a = array.astype(dtype if dtype is not None else array.dtype)
        if self.a.ndim != 2:
            raise ValueError("a sparse matrix is 2-D")

    @property
    def shape(self):
        return self.a.shape

    @property
    def dtype(self):
        return self.a.dtype

    @property
    def T(self):
        return type(self)(self.a.T)

    def transpose(self):
        return self.T

    def _other(self, other):
        return other.a if isinstance(other, _Matrix) else other

    def __add__(self, other):
        return type(self)(self.a + self._other(other))

    def __sub__(self, other):
        return type(self)(self.a - self._other(other))

    def __gt__(self, other):
        return type(self)(self.a > self._other(other))

    def multiply(self, other):
        return type(self)(self.a * self._other(other))

    def dot(self, other):
        return type(self)(self.a @ self._other(other))

    def sum(self, axis=None):
        total = self.a.sum(axis=axis)
        return total if axis is None else np.asmatrix(total).reshape(
            (-1, 1) if axis == 1 else (1, -1))

    def todense(self):
        return np.asmatrix(self.a)

    def toarray(self):
        return np.array(self.a)

    def astype(self, dtype):
        return type(self)(self.a, dtype=dtype)

    def tocoo(self):
        return coo_matrix(self.a)

    def tocsr(self):
        return csr_matrix(self.a)

    # the coordinate view (`row`, `col`, `data`) of the non-zero entries
    @property
    def row(self):
        return np.nonzero(self.a)[0].astype(np.int32)

    @property
    def col(self):
        return np.nonzero(self.a)[1].astype(np.int32)

    @property
    def data(self):
        return self.a[np.nonzero(self.a)]


def _build(arg, shape=None, dtype=None):
    if isinstance(arg, _Matrix):
        return arg.a.astype(dtype) if dtype is not None else arg.a
    if isinstance(arg, tuple) and len(arg) == 2 and isinstance(arg[1], tuple):
        data, (row, col) = arg
        dense = np.zeros(shape, dtype=dtype or np.asarray(data).dtype)
        np.add.at(dense, (np.asarray(row), np.asarray(col)), data)
        return dense
    array = np.asarray(arg)
    return array.astype(dtype) if dtype is not None else array


class coo_matrix(_Matrix):  # noqa: N801 (SciPy's names)
    def __init__(self, arg, shape=None, dtype=None):
        super().__init__(_build(arg, shape, dtype))


class csr_matrix(_Matrix):  # noqa: N801
    def __init__(self, arg, shape=None, dtype=None):
        super().__init__(_build(arg, shape, dtype))


def eye(n, dtype=np.float64):
    return csr_matrix(np.eye(n, dtype=dtype))


def diags(diagonal):
    return csr_matrix(np.diag(np.asarray(diagonal)))
