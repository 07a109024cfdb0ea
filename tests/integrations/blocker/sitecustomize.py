"""Put this folder on PYTHONPATH to make the top-level modules named in BLOCK_MODULES (comma-separated) look
uninstalled (tests/test_install.py): every import finder present at start-up is wrapped to find none of them,
so importing one raises ModuleNotFoundError and importlib.util.find_spec returns None, as when it is missing."""

import os
import sys

BLOCKED = {name for name in os.environ.get("BLOCK_MODULES", "").split(",") if name}


class _Hiding:
    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            return None
        return self.finder.find_spec(name, path, target)

    def __getattr__(self, attribute):  # invalidate_caches, find_distributions, ...
        return getattr(self.finder, attribute)


sys.meta_path[:] = [_Hiding(finder) for finder in sys.meta_path]
