"""Stand-ins for libraries a generator script's imports name but never use (GPU kernels, a
converter's library): ``install(names, module_class)`` makes ``import NAME`` (and its submodules)
give an instance of ``module_class`` for each top-level name in ``names`` (:class:`AnyModule`: one
whose every name is a stand-in). Used by tests/judges/wild_megatron_options.py,
wild_megatron_deepspeed_options.py and wild_torchtitan_configs.py, which only build a parser or a
configuration."""
import importlib.abc
import importlib.machinery
import sys
import types


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


class _Any(type):
    """A stand-in class whose every attribute is another stand-in (a decorator applied through it
    returns what it decorates), empty and false."""

    def __getattr__(cls, k):
        if k.startswith("__"):
            raise AttributeError(k)
        return _Any(f"{cls.__name__}.{k}", (), {})

    def __call__(cls, *a, **k):
        return a[0] if len(a) == 1 and callable(a[0]) and not k else cls

    def __iter__(cls):
        return iter(())

    def __bool__(cls):
        return False


class AnyModule(types.ModuleType):
    """A stand-in module whose every attribute is an :class:`_Any` (the module class ``install``
    takes, for libraries a parser's modules import at the top and never call)."""

    def __getattr__(self, k):
        if k.startswith("__"):
            raise AttributeError(k)
        return _Any(f"{self.__name__}.{k}", (), {})
