"""The keys of dtrain's metrics rows, read from their one definition (src/dtrain/metrics/keys.h).

    from metrics_keys import K
    r[K.samples_per_s]   # "samples_per_s"; K.sample_per_s raises AttributeError

so a table script cannot read a key that dtrain does not write.
"""
import pathlib
import re

_HEADER = pathlib.Path(__file__).resolve().parent.parent / "src/dtrain/metrics/keys.h"
_PATTERN = re.compile(r'^inline constexpr char k\w+\[\] = "([a-z0-9_]+)";', re.M)


class _Keys:
    def __init__(self, keys):
        self._keys = frozenset(keys)
        if not self._keys:
            raise RuntimeError(f"no metrics keys found in {_HEADER}")

    def __getattr__(self, name):
        if name.startswith("_") or name not in self._keys:
            raise AttributeError(f"'{name}' is not a metrics key defined in {_HEADER}")
        return name

    def __iter__(self):
        return iter(sorted(self._keys))


K = _Keys(_PATTERN.findall(_HEADER.read_text()))

if __name__ == "__main__":
    print("\n".join(K))
