"""Fake `absl.app`: `run(main)` parses sys.argv into `flags.FLAGS`, then calls
`main(remaining_argv)` and exits with its return value."""

import sys

from absl import flags


def run(main, argv=None):
    rest = flags.FLAGS(list(sys.argv if argv is None else argv))
    sys.exit(main(rest))
