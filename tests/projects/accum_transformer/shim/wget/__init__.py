"""A fake `wget` (utils.py imports it at module level for download_data, which the
training never calls): `download` raises."""


def download(url, out=None, bar=None):
    raise RuntimeError(f"wget shim: no download here ({url})")
