"""Fake `absl.flags`: DEFINE_bool/integer/float/string/enum/multi_integer, `FLAGS`
(values as attributes, parsed from the command line by `app.run`), `flags_into_string`."""

from __future__ import annotations


class _Flag:
    def __init__(self, name, default, parse, multi=False, boolean=False, enum_values=None):
        self.name, self.default, self.parse = name, default, parse
        self.multi, self.boolean, self.enum_values = multi, boolean, enum_values
        self.value = list(default) if multi else default
        self.given = False


class _FlagValues:
    def __init__(self):
        object.__setattr__(self, "_flags", {})

    def __getattr__(self, name):
        try:
            return self._flags[name].value
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        self._flags[name].value = value

    def _define(self, flag):
        self._flags[flag.name] = flag

    def __call__(self, argv):
        """Parses `--name=value`, `--name value`, `--name` / `--noname` (booleans);
        returns the remaining arguments, argv[0] first."""
        rest, i = [argv[0]], 1
        while i < len(argv):
            arg = argv[i]
            if not arg.startswith("--") or arg == "--":
                rest.append(arg)
                i += 1
                continue
            name, eq, text = arg[2:].partition("=")
            flag = self._flags.get(name)
            if flag is None and name.startswith("no") and name[2:] in self._flags \
                    and self._flags[name[2:]].boolean and not eq:
                self._flags[name[2:]].value = False
                i += 1
                continue
            if flag is None:
                raise SystemExit(f"FATAL Flags parsing error: Unknown command line flag '{name}'")
            if flag.boolean and not eq:
                flag.value = True
                i += 1
                continue
            if not eq:
                i += 1
                text = argv[i]
            value = flag.parse(text)
            if flag.enum_values is not None and value not in flag.enum_values:
                raise SystemExit(f"FATAL Flags parsing error: flag --{name}={text}")
            if flag.multi:
                flag.value = ([] if not flag.given else flag.value) + [value]
            else:
                flag.value = value
            flag.given = True
            i += 1
        return rest

    def flags_into_string(self):
        lines = []
        for flag in self._flags.values():
            values = flag.value if flag.multi else [flag.value]
            for value in values:
                lines.append(f"--{flag.name}={value}")
        return "\n".join(lines) + "\n"


FLAGS = _FlagValues()


def _bool(text):
    return text.lower() in ("1", "true", "t", "yes", "y")


def DEFINE_bool(name, default, help=None, **kwargs):  # noqa: N802, A002
    FLAGS._define(_Flag(name, default, _bool, boolean=True))


DEFINE_boolean = DEFINE_bool


def DEFINE_integer(name, default, help=None, **kwargs):  # noqa: N802, A002
    FLAGS._define(_Flag(name, default, int))


def DEFINE_float(name, default, help=None, **kwargs):  # noqa: N802, A002
    FLAGS._define(_Flag(name, default, float))


def DEFINE_string(name, default, help=None, **kwargs):  # noqa: N802, A002
    FLAGS._define(_Flag(name, default, str))


def DEFINE_enum(name, default, enum_values, help=None, **kwargs):  # noqa: N802, A002
    FLAGS._define(_Flag(name, default, str, enum_values=list(enum_values)))


def DEFINE_multi_integer(name, default, help=None, **kwargs):  # noqa: N802, A002
    FLAGS._define(_Flag(name, default, int, multi=True))
