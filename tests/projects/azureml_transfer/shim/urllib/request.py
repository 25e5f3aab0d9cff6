"""The standard library's `urllib.request` (its source run in this module), with
`urlretrieve` of `.../fowl_data.zip` (Azure ML's hymenoptera-like fowl data set: train/
and val/, one folder per class) writing a fake zip: `fowl_data/` first (the script takes
`zip.namelist()[0]` as its data folder), then train/{chickens,turkeys} with
FOWL_TRAIN_PER_CLASS (2) images each (4 = the hard-coded batch_size: one batch per
epoch) and val/{chickens,turkeys} with FOWL_VAL_PER_CLASS (2) each. The images are
32x32x3 uint8 numpy files named .jpg (the shared shim's PIL reads numpy files whatever
their extension), turkeys brighter than chickens; drawn from a generator seeded 0, so
every process and every run writes the same bytes."""

import io as _io
import os as _os

_REAL = _os.path.join(_os.path.dirname(_os.__file__), "urllib", "request.py")
with open(_REAL, encoding="utf-8") as _f:
    exec(compile(_f.read(), _REAL, "exec"), globals())

_real_urlretrieve = urlretrieve  # noqa: F821 (defined by the source run above)


def _fowl_zip(filename):
    import zipfile

    import numpy as np

    rng = np.random.default_rng(0)
    counts = {"train": int(_os.environ.get("FOWL_TRAIN_PER_CLASS", "2")),
              "val": int(_os.environ.get("FOWL_VAL_PER_CLASS", "2"))}
    with zipfile.ZipFile(filename, "w") as zf:
        zf.writestr("fowl_data/", "")
        for split, n in counts.items():
            for label, cls in enumerate(("chickens", "turkeys")):
                zf.writestr(f"fowl_data/{split}/{cls}/", "")
                for i in range(n):
                    image = rng.integers(0, 128, (32, 32, 3)) + 96 * label
                    buf = _io.BytesIO()
                    np.save(buf, image.astype(np.uint8))
                    zf.writestr(f"fowl_data/{split}/{cls}/{i:03d}.jpg", buf.getvalue())


def urlretrieve(url, filename=None, reporthook=None, data=None):  # noqa: F811
    if str(url).endswith("/fowl_data.zip"):
        filename = filename or "fowl_data.zip"
        _fowl_zip(filename)
        return filename, None
    return _real_urlretrieve(url, filename, reporthook, data)
