"""A fake pandas for han_text: utils.py imports it at module level; only read_csv (the
raw Yahoo Answers CSVs of create_input_files.py, not run by the test) would use it."""


def read_csv(*args, **kwargs):
    raise NotImplementedError("han_text's fake pandas: the preprocessing is not run "
                              "(make_han_data.py writes its output)")
