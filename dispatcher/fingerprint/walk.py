"""The walk from a function to everything that decides its code: closures, defaults,
globals, attribute chains, device functions, ``@overload`` implementations, classes and
values, each encoded by content (or by name for libraries, by identity when opaque)."""
from __future__ import annotations

import enum
import hashlib
import sys
import types
import weakref

from .model import Fingerprint, Uncacheable, _MAX_DEPTH, digest_of
from .code import (_EXACT_SCALARS, _code_info_of, _code_info_once, _scalar_payload, _sort_key,
                   line_digest)
from .libraries import (_deterministic_repr, _has_cai, _is_dispatcher, _is_extern, _is_intrinsic,
                        _is_library, _is_numba_type,
                        _library_named, _module_level_library_class, _named_by_library,
                        _qualified, _type_name)
from ..process import STATE
from .memo import _Cached, _SEEN, _checks_hold, _validated_cache_get


class _Acc:
    """What one function's fingerprint gathered besides its parts. ``checks`` is None when
    the result will not be remembered (a function fingerprinted for the first time: see
    :func:`fingerprint`), and nothing is recorded then."""

    __slots__ = ("opaque", "checks", "cacheable", "lines")

    def __init__(self, record: bool = True):
        self.opaque: list = []
        self.checks: list | None = [] if record else None
        self.cacheable = True
        self.lines: dict = {}  # "module.qualname" -> set of line digests

    def check(self, read, args, expected, by_equality=False):
        """Remember that ``read(*args)`` must still give ``expected`` (the same object, or an
        equal one with ``by_equality``) for the result to be reused."""
        if self.checks is not None:
            self.checks.append((read, args, expected, by_equality))

    def extend(self, checks) -> None:
        if self.checks is not None:
            self.checks.extend(checks)

    def add_lines(self, name: str, digests) -> None:
        self.lines.setdefault(name, set()).update(digests)


def _with_line_info(options) -> bool:
    """True when numba-cuda compiles a function with these options (target options or
    ``@overload`` ``jit_options``) with line information (``debug`` or ``lineinfo``)."""
    return isinstance(options, dict) and bool(options.get("debug") or options.get("lineinfo"))


class _Walk:
    """One fingerprint computation: cycle protection, opaque notes, cache checks."""

    def __init__(self, registries, reached: dict | None = None, code_memo=None):
        # Frontend.registries(): a dispatcher's fixed signatures, a function's @overloads
        self.registries = registries
        # a kernel's code analysis remembered across processes (remembered.CodeMemo), or None
        self.code_memo = code_memo
        # what is remembered of walks with these registries (process.FingerprintMemo)
        self.memo = STATE.fingerprint_memo(registries)
        self.in_progress: set[int] = set()  # id(fn) of the functions being walked
        self.cycles = 0  # back-references met so far
        self.done: dict[int, tuple] = {}  # id(fn) -> (Fingerprint, _Acc), acyclic ones only
        # dependencies(): every dispatcher met, id -> (dispatcher, digest); such a walk reads
        # nothing remembered (the memos skip what they remember, and it must see it all)
        self.reached = reached

    # -- functions -----------------------------------------------------------------------

    def function(self, fn, record: bool = True):
        """(Fingerprint, _Acc) of ``fn``; stores it in the process cache when safe and
        ``record`` is True."""
        self.in_progress.add(id(fn))
        cycles_before = self.cycles
        acc = _Acc(record)
        try:
            parts = self._function_parts(fn, acc)
        finally:
            self.in_progress.discard(id(fn))
        digest = digest_of(sorted(parts.items()), size=32)
        lines = {name: tuple(sorted(d)) for name, d in sorted(acc.lines.items())}
        fp = Fingerprint(digest, parts, sorted(set(acc.opaque)), lines)
        # Recursion below fn makes its digest depend on where the walk entered the cycle:
        # such results are neither cached (acc.cacheable is False) nor reused in this walk.
        if acc.cacheable and acc.checks is not None:
            # Dependencies reached along several paths bring the same check tuples: once each.
            self.memo.results[fn] = _Cached(fp, list({id(c): c for c in acc.checks}.values()))
        if self.cycles == cycles_before:
            self.done[id(fn)] = (fp, acc)
        return fp, acc

    def _function_parts(self, fn, acc) -> dict:
        code = fn.__code__
        # A function's first fingerprint (acc.checks is None): most are the only one, so its
        # code's analysis is not kept either (a kernel's; a device function's is kept by the
        # dependency walk, which records): objects every full collection would go through.
        if acc.checks is not None:
            info = _code_info_of(code)
        else:
            info = self.code_memo.info(code) if self.code_memo is not None else \
                _code_info_once(code)
        parts = {"code": info.digest}
        own = weakref.ref(fn) if acc.checks is not None else None
        acc.check(_weak_attr, (own, "__code__"), code)

        closure = fn.__closure__ or ()
        for i, cell in enumerate(closure):
            try:
                value = cell.cell_contents
            except ValueError:  # empty cell
                parts[f"closure:{i}"] = digest_of(["empty-cell"])
                continue
            acc.check(_cell_value, (cell,), value)
            parts[f"closure:{i}"] = self.value_digest(value, f"closure:{i}", acc)

        acc.check(_weak_attr, (own, "__defaults__"), fn.__defaults__)
        acc.check(_weak_attr, (own, "__kwdefaults__"), fn.__kwdefaults__)
        for name, value in _defaults(fn):
            parts[f"default:{name}"] = self.value_digest(value, f"default:{name}", acc)

        freevars = code.co_freevars
        for kind, name, attrs in info.chains:
            if kind == "g":
                found, base = _lookup_global(fn, name)
                if not found:
                    continue  # an unbound name: numba reports it when compiling
                acc.check(_read_global, (fn.__globals__, name), base)
                base_part = f"global:{name}"
            else:
                if name not in freevars or not closure or not attrs:
                    continue  # a cell value itself is already a closure part
                i = freevars.index(name)
                try:
                    base = closure[i].cell_contents
                except ValueError:
                    continue
                base_part = f"closure:{i}"
            part, value = self._follow(base, attrs, base_part, acc)
            if part.startswith("dep:") or part not in parts:
                parts[part] = self.value_digest(value, part, acc)
        return parts

    def _follow(self, base, attrs, base_part, acc):
        """Walk an attribute chain through modules and (non-library) classes."""
        obj, path = base, []
        for attr in attrs:
            if not (
                isinstance(obj, types.ModuleType)
                or (isinstance(obj, type) and not _is_library(obj.__module__)
                    and not issubclass(obj, enum.Enum))
            ):
                break
            try:
                nxt = getattr(obj, attr)
            except Exception:
                break
            acc.check(getattr, (obj, attr), nxt)
            obj = nxt
            path.append(attr)
        if path:
            owner = base.__name__ if isinstance(base, types.ModuleType) else _qualified(base)
            part = f"attr:{owner}.{'.'.join(path)}"
        else:
            part = base_part
        known = self.memo.named.get(id(obj))  # named by its library (cuda.grid, math.sqrt): no dependency
        if (known is None or known[0] is not obj) and self._is_dep(obj):
            part = f"dep:{_qualified(getattr(obj, 'py_func', obj))}"
        return part, obj

    def _is_dep(self, obj) -> bool:
        if _is_dispatcher(obj) or _is_intrinsic(obj):
            return not _named_by_library(obj)
        return isinstance(obj, types.FunctionType) and not _named_by_library(obj)

    # -- values --------------------------------------------------------------------------

    def value_digest(self, value, where, acc) -> str:
        named = self.memo.named
        known = named.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        if _is_dispatcher(value) and id(value.py_func) not in self.in_progress \
                and not _named_by_library(value):
            return self._dependency_digest(value, where, acc)
        opaque, cacheable = len(acc.opaque), acc.cacheable
        payload = self.encode(value, where, acc, 0)
        digest = digest_of(payload)
        if (payload[0] in _BY_NAME and len(acc.opaque) == opaque and acc.cacheable == cacheable
                and len(named) < 4096):
            named[id(value)] = (value, digest)
        return digest

    def _dependency_digest(self, disp, where, acc) -> str:
        """value_digest of a device function (or other dispatcher) reached by name: remembered
        per dispatcher with the checks of everything it read, and reused while they hold
        (most kernels of an application reach the same few device functions; working each
        one's digest out again took a third of a kernel's fingerprint)."""
        memo = self.memo.dependencies.get(disp) if self.reached is None else None
        if memo is not None and memo[0] == where and _checks_hold(memo[2]):
            _, digest, checks, opaque, lines = memo
        else:
            sub, cycles = _Acc(), self.cycles
            digest = digest_of(self.encode(disp, where, sub, 0))
            checks, opaque, lines = sub.checks, sub.opaque, sub.lines
            if sub.cacheable and self.cycles == cycles:
                try:
                    self.memo.dependencies[disp] = (where, digest, checks, opaque, lines)
                except TypeError:  # not weak-referenceable: just not remembered
                    pass
            else:
                acc.cacheable = False
        acc.extend(checks)
        acc.opaque.extend(opaque)
        for name, digests in lines.items():
            acc.add_lines(name, digests)
        return digest

    def encode(self, value, where, acc, depth):
        """Canonical payload of a value; dependencies return ["dep", digest]."""
        if depth > _MAX_DEPTH:
            acc.opaque.append(f"{where}: nested deeper than {_MAX_DEPTH} levels")
            acc.cacheable = False
            return ["too-deep"]
        exact = _EXACT_SCALARS.get(type(value))
        if exact is not None:  # the common case, without the isinstance chain below
            return exact(value)
        if isinstance(value, enum.Enum):
            return ["enum", _type_name(value), value.name,
                    self.encode(value.value, where, acc, depth + 1)]
        scalar = _scalar_payload(value)
        if scalar is not None:
            return scalar
        if _is_dispatcher(value):  # before the device-array probe: a dependency, the usual case
            if _named_by_library(value):
                return ["function", _qualified(value)]
            return ["dep", self._dispatcher_digest(value, where, acc)]
        if _has_cai(value):
            raise Uncacheable(
                f"{where} is a device array ({_type_name(value)}); kernels that capture device "
                "arrays are compiled and run normally but never cached"
            )
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            encoded = self._encode_numpy(numpy, value, where, acc)
            if encoded is not None:
                return encoded
        if isinstance(value, (tuple, list)):
            if isinstance(value, list):
                acc.cacheable = False  # mutable: re-read every time
            items = [self.encode(v, where, acc, depth + 1) for v in value]
            kind = type(value).__name__ if type(value) in (tuple, list) else _type_name(value)
            return [kind, items]
        if isinstance(value, (set, frozenset)):
            acc.cacheable = acc.cacheable and isinstance(value, frozenset)
            items = [self.encode(v, where, acc, depth + 1) for v in value]
            return ["set", sorted(items, key=_sort_key)]
        if isinstance(value, dict):
            acc.cacheable = False
            items = [[self.encode(k, where, acc, depth + 1), self.encode(v, where, acc, depth + 1)]
                     for k, v in value.items()]
            return ["dict", sorted(items, key=_sort_key)]
        if (_is_dispatcher(value) or _is_intrinsic(value)) and _named_by_library(value):
            return ["function", _qualified(value)]
        if _is_dispatcher(value):
            return ["dep", self._dispatcher_digest(value, where, acc)]
        if _is_intrinsic(value):
            return ["dep", digest_of(["intrinsic", self._function_digest(value._defn, acc)])]
        if isinstance(value, types.FunctionType):
            if _named_by_library(value, value.__module__):
                return ["function", _qualified(value)]
            return ["dep", self._plain_function_digest(value, acc)]
        if isinstance(value, types.ModuleType):
            return ["module", value.__name__]
        if isinstance(value, (types.BuiltinFunctionType, types.MethodWrapperType,
                              types.WrapperDescriptorType, types.MethodDescriptorType)):
            return ["builtin", _qualified(value)]
        if _is_numba_type(value):
            return ["numba-type", _type_name(value), str(value)]
        if _is_extern(value):
            # cuda.declare_device(name, sig): the foreign symbol and its signature.
            return ["extern", value.name, str(getattr(value, "sig", ""))]
        if isinstance(value, type):
            return self._encode_class(value, where, acc, depth)
        if _library_named(value):  # a library's function of another type (numpy's)
            return ["function", _qualified(value)]
        return self._encode_opaque(value, where, acc)

    def _encode_numpy(self, np, value, where, acc):
        if isinstance(value, np.ndarray):
            acc.cacheable = False  # contents may change in place
            if value.dtype.hasobject:
                acc.opaque.append(f"{where}: numpy array of Python objects")
                return ["ndarray-object", _dtype_payload(value.dtype), list(value.shape)]
            data = np.ascontiguousarray(value)
            return ["ndarray", _dtype_payload(value.dtype), list(value.shape),
                    hashlib.blake2b(data.view(np.uint8).reshape(-1) if data.size else b"",
                                    digest_size=32).digest()]
        if isinstance(value, np.generic):
            return ["npscalar", _dtype_payload(value.dtype), value.tobytes()]
        if isinstance(value, np.dtype):
            return ["dtype", _dtype_payload(value)]
        return None

    def _encode_class(self, cls, where, acc, depth):
        if issubclass(cls, enum.Enum):
            members = [[name, self.encode(member.value, where, acc, depth + 1)]
                       for name, member in cls.__members__.items()]
            return ["enum-class", _qualified(cls), members]
        if not _is_library(cls.__module__):
            acc.opaque.append(f"{where}: class {_qualified(cls)} (identified by name only)")
        return ["class", _qualified(cls)]

    def class_payload(self, cls, where, acc, depth):
        """A class by content: name, bases (by content unless a library's own class) and the
        members of its namespace: methods by content, static/class methods and properties by
        their functions, other values encoded. Line numbers and the docstring are left out."""
        if depth > _MAX_DEPTH:
            return self._encode_class(cls, where, acc, depth)
        bases = [self.class_payload(b, where, acc, depth + 1)
                 if not _module_level_library_class(b) else ["class", _qualified(b)]
                 for b in cls.__bases__]
        members = []
        for name, member in sorted(vars(cls).items()):
            if name in _CLASS_NOT_CONTENT:
                continue
            spot = f"{where}.{name}"
            if isinstance(member, (staticmethod, classmethod)):
                payload = [type(member).__name__, self.encode(member.__func__, spot, acc, depth + 1)]
            elif isinstance(member, property):
                payload = ["property"] + [self.encode(f, spot, acc, depth + 1)
                                          for f in (member.fget, member.fset, member.fdel)]
            else:
                payload = self.encode(member, spot, acc, depth + 1)
            members.append([name, payload])
        return ["class-content", _qualified(cls), bases, members]

    def _encode_opaque(self, value, where, acc):
        acc.cacheable = False
        text = _deterministic_repr(value)
        if not _is_library(type(value).__module__) or text is None:
            how = "type and repr" if text is not None else "type only"
            acc.opaque.append(f"{where}: object of type {_type_name(value)} (identified by {how})")
        return ["opaque", _type_name(value), text]

    # -- dependencies --------------------------------------------------------------------

    def _function_digest(self, fn, acc) -> str:
        key = id(fn)
        if key in self.in_progress:
            # Recursion: name the function instead of walking it again.
            self.cycles += 1
            acc.cacheable = False  # a back-reference is not a pure function of fn's inputs
            return digest_of(["cycle", _qualified(fn)])
        done = self.done.get(key)
        if done is None:
            cached = self.memo.results.get(fn) if self.reached is None else None
            if cached is not None and cached is not _SEEN and \
                    _validated_cache_get(cached) is cached.fp:
                dep_acc = _Acc()
                dep_acc.checks = cached.checks
                done = self.done[key] = (cached.fp, dep_acc)
            else:
                done = self.function(fn)  # recursion members are walked again each time
        fp, dep_acc = done
        # The caller's cached fingerprint is valid only while the dependency's inputs are.
        acc.extend(dep_acc.checks)
        acc.cacheable = acc.cacheable and dep_acc.cacheable
        acc.opaque.extend(f"{_qualified(fn)} {reason}" for reason in fp.opaque)
        for name, digests in fp.lines.items():
            acc.add_lines(name, digests)
        return fp.digest

    def _plain_function_digest(self, fn, acc) -> str:
        # A plain function may be the target of @overload(fn): its typing templates hold the
        # Python implementations numba-cuda compiles instead of fn's own body.
        own = self._function_digest(fn, acc)
        read = self.registries.overload_implementations
        registered = read(fn)
        # An @overload registered after this fingerprint was cached must be seen.
        acc.check(read, (fn,), registered, by_equality=True)
        impls = [self._overload_payload(impl, opts, acc) for impl, opts in registered]
        digest = digest_of(["overloaded", own, sorted(impls, key=_sort_key)]) if impls else own
        if self.reached is not None and registered:  # numba-cuda compiles it once per types
            self.reached[id(fn)] = (fn, digest)
        return digest

    def _overload_payload(self, impl, jit_options, acc):
        options = self.encode(jit_options, "overload options", _Acc(), 0)
        if isinstance(impl, types.FunctionType) and not _named_by_library(impl, impl.__module__):
            digest = self._function_digest(impl, acc)
            if _with_line_info(jit_options):
                acc.add_lines(_qualified(impl), (line_digest(impl),))
            return ["overload", digest, options]
        return ["overload", _qualified(impl), options]

    def _dispatcher_digest(self, disp, where, acc) -> str:
        fn = disp.py_func
        fn_digest = self._function_digest(fn, acc)
        options = getattr(disp, "targetoptions", None) or {}
        # Options hold lists (link, extensions): compare with a copy whose lists are copied
        # too, which sees a list changed in place, instead of giving up caching.
        snapshot = _copied(options)
        # Through a weak reference: these checks are remembered with disp as the key
        # (FingerprintMemo.dependencies), and a strong one would keep a device function made
        # at run time alive for good.
        ref = _weak(disp)
        acc.check(_target_options, (ref,), snapshot, by_equality=True)
        acc.check(_weak_attr, (ref, "py_func"), fn)
        if _with_line_info(options):
            # A device function compiled with line info brings its line table into the kernel.
            acc.add_lines(_qualified(fn), (line_digest(fn),))
        parts = ["dispatcher", fn_digest, self._options_digest(disp, options, snapshot, where, acc)]
        fixed = self.registries.fixed_signatures(disp)
        if fixed is not None:
            # @jit("(i4, i4)") types a call against these alone (or refuses it, as a CPU
            # function on the device): the same body without them is another dependency.
            parts.append(["signatures", fixed])
            acc.check(_weak_fixed_signatures, (self.registries, ref), fixed, by_equality=True)
        digest = digest_of(parts)
        if self.reached is not None:
            self.reached[id(disp)] = (disp, digest)
        return digest

    def _options_digest(self, disp, options, snapshot, where, acc) -> str:
        """Digest of a dispatcher's target options, remembered per dispatcher while they
        compare equal to the copy taken then (most kernels reach the same few device
        functions)."""
        memo = self.memo.options.get(disp)
        try:
            if memo is not None and memo[0] == snapshot:
                return memo[1]
        except Exception:  # an option value whose == raises: compute afresh
            pass
        opts_acc = _Acc()
        # Option names are unique strings: sorting by name is canonical.
        items = [[k, self.encode(options[k], f"{where} option {k}", opts_acc, 1)]
                 for k in sorted(options, key=str)]
        digest = digest_of(items)
        acc.opaque.extend(opts_acc.opaque)
        # An option holding a function (an ``inline`` cost model) is a dependency: its inputs
        # must be re-checked like any other. The options' own lists are covered by the
        # snapshot comparison, so they do not make the caller uncacheable.
        acc.extend(opts_acc.checks)
        if not opts_acc.opaque and not opts_acc.checks:  # plain values: equality suffices
            try:
                self.memo.options[disp] = (snapshot, digest)
            except TypeError:  # not weak-referenceable: just not remembered
                pass
        return digest


# Namespace entries of a class that are not code: its own bookkeeping, the line it starts on
# (3.13) and the docstring.
_CLASS_NOT_CONTENT = frozenset({"__dict__", "__weakref__", "__module__", "__qualname__",
                                "__doc__", "__firstlineno__", "__static_attributes__",
                                "_abc_impl"})  # _abc_impl: abc's registry and caches

# FingerprintMemo.named: digests of objects encoded by their name alone (library functions,
# modules, builtins, library classes: cuda.grid, np.float32, range, ...), by identity: the
# same object always has the same name, and most kernels reach the same few. The object is
# held, so its id is not reused. Only when encoding it noted nothing (no opaque reason,
# cacheability kept).
_BY_NAME = frozenset({"function", "module", "builtin", "class"})


def _copied(options: dict) -> dict:
    """A copy of a target options dict with its list, set and dict values copied too, so that
    comparing it with the live dict (``==``) sees a value changed in place."""
    return {k: v.copy() if type(v) in _MUTABLE else v for k, v in options.items()}


_MUTABLE = (list, set, dict)


def _dtype_payload(dtype) -> list:
    # descr spells out record fields, offsets and sub-arrays; str gives byte order and kind.
    return [dtype.str, repr(dtype.descr), dtype.itemsize, bool(dtype.isalignedstruct)]


def _defaults(fn):
    code = fn.__code__
    names = code.co_varnames[: code.co_argcount]
    defaults = fn.__defaults__ or ()
    out = list(zip(names[len(names) - len(defaults):], defaults))
    out.extend(sorted((fn.__kwdefaults__ or {}).items()))
    return out


def _lookup_global(fn, name):
    g = fn.__globals__
    if name in g:
        return True, g[name]
    builtins_ns = g.get("__builtins__", __builtins__)
    if isinstance(builtins_ns, types.ModuleType):
        builtins_ns = builtins_ns.__dict__
    if name in builtins_ns:
        return True, builtins_ns[name]
    return False, None


# Readers of the checks (see _Cached): each gives the current value of one input.

def _cell_value(cell):
    return cell.cell_contents


def _weak_attr(ref, attr):
    # The cache maps fn -> checks weakly; a check holding fn itself would keep it alive
    # forever (closures made in a loop), so it reads fn through a weak reference (a dead
    # one raises AttributeError on None: the result is recomputed).
    return getattr(ref(), attr)


def _read_global(namespace, name):
    if name in namespace:
        return namespace[name]
    builtins_ns = namespace.get("__builtins__", __builtins__)
    if isinstance(builtins_ns, types.ModuleType):
        builtins_ns = builtins_ns.__dict__
    return builtins_ns[name]


def _target_options(ref):
    return getattr(ref(), "targetoptions", None) or {}


def _weak_fixed_signatures(registries, ref):
    return registries.fixed_signatures(ref())


def _weak(obj):
    """A weak reference to ``obj``, or (not weak-referenceable) a callable returning it."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj
