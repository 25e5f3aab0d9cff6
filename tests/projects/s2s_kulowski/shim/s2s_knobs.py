"""What s2s_kulowski's DISTRUN_SHIM_MAIN_GLOBALS rebinds in example.py's `__main__`.

example.py hard-codes its sizes as keyword literals of calls (`synthetic_data()`'s
default Nt=2000, `train_model(..., n_epochs=50, batch_size=5, ...)`,
`plot_train_test_results(...)`'s default num_rows=4): each module name the script
imports is rebound to a namespace that forwards to the upstream module with smaller
values, read from the environment. Nothing upstream is edited; the converter reads the
files as they are.
"""

import os
import types


def _env(name, default):
    return int(os.environ.get(name, default))


def small_data(generate_dataset):
    """generate_dataset with synthetic_data's Nt from S2S_NT."""
    ns = types.SimpleNamespace(**{k: getattr(generate_dataset, k)
                                  for k in dir(generate_dataset) if not k.startswith("__")})

    def synthetic_data(Nt=None, **kwargs):
        return generate_dataset.synthetic_data(Nt=_env("S2S_NT", 120), **kwargs)

    ns.synthetic_data = synthetic_data
    return ns


def short_training(lstm_encoder_decoder):
    """lstm_encoder_decoder with lstm_seq2seq.train_model's epochs and batch from
    S2S_EPOCHS / S2S_BATCH (a subclass: same state_dict keys)."""
    base = lstm_encoder_decoder.lstm_seq2seq

    class lstm_seq2seq(base):
        def train_model(self, input_tensor, target_tensor, n_epochs, target_len, batch_size,
                        *args, **kwargs):
            return base.train_model(self, input_tensor, target_tensor, _env("S2S_EPOCHS", 3),
                                    target_len, _env("S2S_BATCH", 8), *args, **kwargs)

    ns = types.SimpleNamespace(**{k: getattr(lstm_encoder_decoder, k)
                                  for k in dir(lstm_encoder_decoder) if not k.startswith("__")})
    ns.lstm_seq2seq = lstm_seq2seq
    return ns


def few_rows(plotting):
    """plotting with plot_train_test_results's num_rows from S2S_ROWS (the test set holds
    2 windows); its `plt.subplots` gives a numpy array of axes, as matplotlib's does
    (plotting.py indexes `ax[ii, 0]`; the shared fake returns nested lists)."""
    import numpy as np

    fake_plt = plotting.plt

    class _Plt:
        def __getattr__(self, name):
            return getattr(fake_plt, name)

    ns_plt = _Plt()

    def subplots(*args, **kwargs):
        fig, ax = fake_plt.subplots(*args, **kwargs)
        grid = np.empty((len(ax), len(ax[0])), dtype=object)
        for i, row in enumerate(ax):
            for j, a in enumerate(row):
                grid[i, j] = a
        return fig, grid

    ns_plt.subplots = subplots
    plotting.plt = ns_plt
    ns = types.SimpleNamespace(**{k: getattr(plotting, k)
                                  for k in dir(plotting) if not k.startswith("__")})

    def plot_train_test_results(*args, **kwargs):
        kwargs["num_rows"] = _env("S2S_ROWS", 2)
        return plotting.plot_train_test_results(*args, **kwargs)

    ns.plot_train_test_results = plot_train_test_results
    return ns
