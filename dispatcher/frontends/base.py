"""What a front-end bridge provides: the seam between kcache's front-end-generic dispatcher
code and one compiler front-end (numba-cuda; numba-cuda-mlir next).

A bridge is a package under ``dispatcher/frontends/`` holding every internal of its front-end;
nothing else in kcache reads a private name of that front-end. The rules a bridge keeps
(tests/test_frontend_bridge.py and tests/test_structure.py check them):

* Its module ``bridge`` defines ``FRONTEND``, an object with the attributes and methods of
  :class:`Frontend` below (:class:`BridgeMethods` gives those every bridge implements alike). Importing ``bridge`` imports the front-end's public package only;
  the bridge's other modules (its internals, its dispatcher subclass) are imported by
  ``FRONTEND``'s methods, once :meth:`Frontend.refusal` has said the front-end is supported, so
  that an unsupported version costs one warning, never an ImportError.
* The bridge's other modules never import ``bridge`` (it imports them: that would be an import
  circle). They are handed the Frontend object instead: :meth:`Frontend.adopt` passes it to the
  dispatcher subclass, which keeps it and hands it on.
* ``FRONTEND`` pickles as a reference to itself (``__reduce__`` returning ``"FRONTEND"``):
  ``kcache warm`` hands it to the worker processes it spawns.
* The front-end-generic modules of ``dispatcher/`` (the key, the fingerprint, extension
  registrations, numba's configuration, the signature grammar, compile_for, warm, record,
  replay) never import a bridge or numba: they are handed a Frontend by their caller and ask
  it for what they need of the front-end (numba's configuration module, types, registries,
  compiles, rebuilds). Only the entry points pick a front-end: ``kcache.dispatcher``'s
  ``__init__`` (compile_for, check_cc, explain), ``install`` and ``jit``; ``kcache warm``
  (cli/cmd_warm.py) hands its Plan the one it picked.
* What the generic modules keep for the life of the process is in ``process.STATE``; memos
  that depend on a front-end are keyed by it (the fingerprint's, by its :meth:`registries`).

A second front-end adds a package ``frontends/<name>/`` with its ``bridge.FRONTEND`` and an entry
point that picks it; the generic modules do not change.
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Callable, ContextManager, Protocol

# (for the generic modules, which may import this module alone of frontends/)
from .known import name_of_dispatcher, of_module_name  # noqa: F401


class Frontend(Protocol):
    """A compiler front-end kcache serves kernels of.

    ``name``: the front-end's name as entries record it (``"numba-cuda"``,
    ``"numba-cuda-mlir"``: key component ``frontend`` and entry ``meta["frontend"]`` for any
    front-end but numba-cuda, whose keys and entries came first); ``distribution``:
    its package on PyPI, whose version :meth:`version` reports; ``supported``: the releases
    that have what the bridge needs (a version specifier, e.g. ``">= 0.26, < 0.31"``).
    """

    name: str
    distribution: str
    supported: str

    def version(self) -> str | None:
        """The installed front-end's version, or None when unknown."""

    def numba(self) -> ModuleType:
        """The numba package the front-end compiles with: ``numba.cuda`` for numba-cuda,
        ``numba_cuda_mlir.numba_cuda`` for numba-cuda-mlir (which vendors it). The generic
        modules never import numba: what they need of it comes through the methods below
        (:meth:`numba_config`, :meth:`types`, :meth:`registries`, ...)."""

    def refusal(self) -> str | None:
        """None when the installed front-end has every internal the bridge needs (tested as
        features, never by version number); else the one line that says it has not, naming
        the installed and the :attr:`supported` versions. Worked out once per process."""

    def warn_refusal(self) -> bool:
        """Warn :meth:`refusal`'s line once per process when there is one; True when refused
        (caching is then off for this front-end: its own jit runs unchanged)."""

    def is_signature(self, obj) -> bool:
        """True if ``obj`` is an eager signature for the front-end's ``jit`` decorator."""

    def is_kernel_dispatcher(self, obj) -> bool:
        """True if ``obj`` is a kernel dispatcher of this front-end (kcache's or its own)."""

    def dispatcher_class(self) -> type:
        """kcache's dispatcher subclass for this front-end: overloads served from the store,
        compiled on a miss (``compile``), rebuilt from an entry on a hit. Importing it imports
        the store and the key."""

    def adopt(self, dispatcher, options) -> object:
        """Turn the front-end's dispatcher into kcache's in place (nothing compiled is lost);
        ``options``: ``kcache.dispatcher.options.Options``. Returns it. The dispatcher is
        handed this Frontend (it keeps it, for the generic modules it calls, and for the
        dispatchers it makes: specializations, pickling)."""

    def patch(self, on_enable_caching: Callable, on_init: Callable) -> None:
        """Install the transparent switch: route the front-end's ``cache=True``
        (``enable_caching``) to ``on_enable_caching(dispatcher, original)`` and call
        ``on_init(dispatcher)`` after each new kernel dispatcher. Idempotent."""

    def unpatch(self) -> None:
        """Uninstall the transparent switch: the front-end's own methods back."""

    def is_patched(self) -> bool:
        """True while :meth:`patch` is in effect."""

    def offline_target(self, cc) -> ContextManager[tuple]:
        """A block in which kernels compile for compute capability ``cc`` without a GPU
        (``compile_for``, ``kcache warm``); yields the full cc tuple."""

    def compile_kernel(self, py_func, argtypes: tuple, targetoptions: dict) -> object:
        """Compile a kernel exactly as the front-end does on a cache miss."""

    def kernel_state(self, kernel, cc) -> dict:
        """What an entry keeps of a compiled kernel for full cc ``cc``: the artifacts (cubin,
        PTX, LTO-IR) unchanged and the plain data the rebuild needs."""

    def rebuild_kernel(self, state: dict, argtypes: tuple, cc, **served) -> object:
        """A launchable kernel from :meth:`kernel_state`'s ``state``, without the front-end's
        typing or target context."""

    # What the front-end-generic modules ask of the front-end they are handed (issue 33:
    # they never import a bridge themselves).

    def numba_config(self) -> ModuleType:
        """The configuration module the front-end reads while compiling (numba's
        ``core.config``, vendored or not): ``numba_config`` and the key's components read
        the settings that change code from it."""

    def current_cc(self) -> tuple:
        """(major, minor) of the current device; never builds a typing or target context
        (``require`` names it in a refusal)."""

    def signature_display(self, argtypes: tuple) -> str:
        """Argument types as the front-end prints them, for people (entry
        ``meta["signature"]``, messages): ``"(array(float32, 1d, C), float32)"``."""

    def uncacheable_reason(self, kernel) -> str | None:
        """Why a compiled kernel cannot be rebuilt from its artifacts and plain data alone
        (it holds live Python objects), or None (``kernel_entry.kernel_to_entry``)."""

    def device_overloads(self, dispatcher) -> list:
        """The compile results a device-function dispatcher holds, one per argument types
        (``dep_guard`` tells a compile it made from one it reused)."""

    def never_served_reason(self, dispatcher) -> str | None:
        """Why a program never uses an entry of kernel ``dispatcher`` (``kcache warm`` skips
        it), or None: a ``jit(cache=True)`` kernel that links files asked for the front-end's
        own cache, which refuses it (docs/dispatcher.md); a ``kcache.jit`` one is served."""

    def registries(self) -> ModuleType:
        """The reader of the front-end's extension registries (``extensions``, the
        fingerprint's walk): a namespace with ``loaded()`` (anything can be registered yet),
        ``extension_registry_modules()``, ``extension_registries()`` (``[(kind, hot,
        container)]``), ``extension_parts(kind, items)``, ``extension_records(kind, item)``,
        ``fixed_signatures(dispatcher)`` and ``overload_implementations(fn)``."""

    def types(self) -> ModuleType:
        """The numba types module of the front-end (``numba.cuda.types``): ``sigspec``
        writes and checks signature text with its classes."""

    def signature_namespace(self) -> dict:
        """The names a signature string is evaluated with by the front-end's ``jit``
        (``sigspec`` checks the text against its grammar and these names first)."""

    def signature_string(self, argtypes: tuple) -> str:
        """The key's ``signature`` component: the argument types' exact text, naming layout,
        readonly and alignment (``"(array(float32, 1d, C),)"``)."""

    def normalize_signature(self, sig) -> tuple:
        """Argument types of ``sig`` (a signature string, a signature object or a tuple of
        types), as the front-end's ``jit`` reads an eager signature. Raises TypeError for a
        kernel signature that does not return void."""

    def supported_ccs(self) -> list | None:
        """The compute capabilities ((major, minor), ascending) the installed toolkit
        compiles for; None when it cannot be asked (``compile_for``, ``kcache warm --cc``)."""

    #: The ``launch_config`` component of a launch-config-sensitive kernel compiled for no
    #: launch configuration (an eager compile): what ``kcache warm --replay`` may replay.
    no_launch_config: object

    def launch_config_key(self, dispatcher, launch_config) -> object:
        """The front-end's launch-configuration key of ``dispatcher`` for ``launch_config``
        (None: the key of no launch configuration, :attr:`no_launch_config`)."""

    def deferred_eager_compiles(self) -> ContextManager:
        """A block in which kernels given eager signatures note them instead of compiling
        (``kcache warm`` imports the program's modules in one)."""

    def eager_signatures(self, dispatcher) -> list:
        """The argument types of each eager signature ``dispatcher`` was given (compiled, or
        noted in :meth:`deferred_eager_compiles`)."""

    def eager_device_functions(self, cc) -> ContextManager:
        """A block in which the device functions given eager signatures (noted at import)
        compile for compute capability ``cc`` as they are reached."""

    # Added for a second front-end (issue 34: numba-cuda-mlir).

    #: The front-end's ``jit`` decorator by its public name, for messages
    #: (``"numba.cuda.jit"``).
    jit_name: str

    def jit(self) -> Callable:
        """The front-end's ``jit`` decorator (``numba.cuda.jit``), imported now."""

    def key_targetoptions(self, dispatcher) -> dict:
        """The target options of ``dispatcher`` the key takes (``components.encode_options``
        encodes them): those that change code, as the user gave them (numba-cuda: every
        one)."""

    def key_toolchain(self, versions):
        """The key's ``toolchain`` component for this front-end's kernels from the process's
        versions (``components.toolchain_shared()``, numba-cuda's toolchain): the
        front-end's own compiler packages in, the others out."""

    def arch_name(self, cc) -> str:
        """The arch the front-end compiles a kernel for on a device of compute capability
        ``cc`` (numba-cuda: ``kcache.arch.arch_name``, ``sm_90a`` for 9.0; numba-cuda-mlir:
        ``sm_90``), as entries record it."""


def package_modules(package: str) -> Callable[[str], ModuleType]:
    """A bridge's lookup of its own modules by name (``"signatures"`` for
    ``<package>.signatures``), each imported on first use, once :meth:`Frontend.refusal` allows
    it. The methods every key and hit calls use it: a ``from . import`` in each cost two calls
    into importlib's Python code (``__spec__.parent``, ``_handle_fromlist``) per call."""
    loaded: dict[str, ModuleType] = {}

    def module(name: str) -> ModuleType:
        found = loaded.get(name)
        if found is None:
            found = loaded[name] = importlib.import_module(f"{package}.{name}")
        return found
    return module


class BridgeMethods:
    """The :class:`Frontend` methods every bridge implements alike: each hands the call to the
    module of the bridge's own package that holds it (``support``, ``signatures``,
    ``compiling``, ...), imported on first use (:func:`package_modules`). A bridge subclasses
    it, sets :attr:`package` to its ``__package__`` and defines what is its own (the
    dispatcher classes, ``jit``, ``types``, the key's options and toolchain, ...)."""

    #: The bridge's package (``kcache.dispatcher.frontends.<name>``).
    package: str

    def __init__(self):
        self._module = package_modules(self.package)

    def __reduce__(self):
        return "FRONTEND"  # pickled as a reference to its module's one (kcache warm's workers)

    def refusal(self) -> str | None:
        return self._module("support").refusal()

    def warn_refusal(self) -> bool:
        return self._module("support").warn_refusal()

    def is_signature(self, obj) -> bool:
        return self._module("signatures").is_signature(obj)

    def adopt(self, dispatcher, options):
        # the dispatcher is handed its front-end
        return self._module("dispatcher").adopt(self, dispatcher, options)

    def patch(self, on_enable_caching, on_init) -> None:
        patching = self._module("patching")
        if not patching.is_patched():
            patching.patch_dispatcher(on_enable_caching, on_init)

    def unpatch(self) -> None:
        self._module("patching").unpatch_dispatcher()

    def is_patched(self) -> bool:
        return self._module("patching").is_patched()

    def offline_target(self, cc):
        return self._module("offline").offline_target(cc)

    def compile_kernel(self, py_func, argtypes: tuple, targetoptions: dict):
        return self._module("compiling").compile_kernel(py_func, argtypes, targetoptions)

    def kernel_state(self, kernel, cc) -> dict:
        return self._module("rebuild").kernel_state(kernel, cc)

    def rebuild_kernel(self, state: dict, argtypes: tuple, cc, **served):
        return self._module("rebuild").rebuild_kernel(state, argtypes, cc, **served)

    def numba_config(self):
        return self._module("signatures").numba_config()

    def current_cc(self) -> tuple:
        return self._module("signatures").current_cc()

    def signature_display(self, argtypes: tuple) -> str:
        return self._module("signatures").signature_display(argtypes)

    def uncacheable_reason(self, kernel) -> str | None:
        return self._module("compiling").uncacheable_reason(kernel)

    def device_overloads(self, dispatcher) -> list:
        return self._module("compiling").device_overloads(dispatcher)

    def never_served_reason(self, dispatcher) -> str | None:
        if not dispatcher.targetoptions.get("link"):
            return None
        if isinstance(dispatcher, self.dispatcher_class()):  # install() marks cache=True
            asked = getattr(dispatcher, "_kcache_numba_cache", False)
        else:  # imported without install() (kcache warm): jit(cache=True) gave it a cache
            asked = not isinstance(dispatcher._cache, self._module("internals").NullCache)
        if not asked:
            return None
        return (f"{self.jit_name}(cache=True) with link=: {self.name}'s cache refuses "
                "kernels that link files, so a program (KCACHE_ENABLE, install()) compiles "
                "it and never uses an entry; kcache.jit caches it")

    def registries(self):
        return self._module("registries")

    def signature_namespace(self) -> dict:
        return self._module("signatures").signature_namespace()

    def signature_string(self, argtypes: tuple) -> str:
        return self._module("signatures").signature_string(argtypes)

    def normalize_signature(self, sig) -> tuple:
        return self._module("signatures").normalize_signature(sig)

    def supported_ccs(self) -> list | None:
        return self._module("signatures").supported_ccs()

    def deferred_eager_compiles(self):
        return self._module("eager").deferred_eager_compiles()

    def eager_signatures(self, dispatcher) -> list:
        return self._module("eager").eager_signatures(dispatcher)

    def eager_device_functions(self, cc):
        return self._module("eager").eager_device_functions(cc)
