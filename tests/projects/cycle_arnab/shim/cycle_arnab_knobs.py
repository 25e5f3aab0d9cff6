"""What cycle_arnab's DISTRUN_SHIM_MAIN_GLOBALS puts in place of the repository's
`utils.cuda` (utils.py:15-20), the helper every batch goes through:

    def cuda(xs):
        if torch.cuda.is_available():
            ...return xs.cuda() / [x.cuda() for x in xs]

Without CUDA it falls off its end and returns None, so `a_real, b_real =
utils.cuda([a_real, b_real])` (model.py:103) cannot unpack it: the script runs only on a
GPU. On this CPU machine both runs, the original and the converted one, get `same`: the
tensors as they are, which is what moving them to the one device there is would do.
The converted utils.py is read, not run, for what it does with the helper."""


def same(xs):
    return xs
