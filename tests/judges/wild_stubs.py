"""Stand-ins for libraries a generator script's imports name but never use (GPU kernels, a
converter's library): ``install(names, module_class)`` makes ``import NAME`` (and its submodules)
give an instance of ``module_class`` for each top-level name in ``names``. Used by
tests/judges/wild_megatron_options.py and wild_torchtitan_configs.py, which only build a parser or
a configuration."""
import importlib.abc
import importlib.machinery
import sys


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names, module_class):
        self.names, self.module_class = set(names), module_class

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        m = self.module_class(spec.name)
        m.__path__, m.__version__ = [], "99.0"
        return m

    def exec_module(self, m):
        pass


def install(names, module_class) -> None:
    sys.meta_path.insert(0, _Finder(names, module_class))
