"""Which kernel a stale entry of ``kcache warm --replay`` is compiled again for, found in
warm's runner (a worker process, or warm itself) after importing the entry's module.

An entry names its kernel "module:qualname" (``process.kernel_name``), most often a module
attribute. A kernel bound to another module name is not: a factory's closure
(``add3 = make_adder(3.0)``: "mod:make_adder.<locals>.adder") or ``k = cuda.jit(sig)(impl)``
("mod:impl", a function). Such a kernel is found among the module's kernels that carry the
entry's name (``discover.kernels_named``), and where several do (``add3`` and ``add4`` of one
factory), the one whose key components are the entry's but for the toolchain: a closure's
values are in its code fingerprint. Its row names it as warm does, "module:attr".
(warm.py imports this module: replay.py imports warm.py.)
"""
from __future__ import annotations

from . import discover

__all__ = ["find", "changed"]


def find(frontend, module, qualname: str, expect: dict, components_of) -> tuple:
    """``(kernel, name)``: the kernel of ``module`` the entry of components ``expect``,
    named ``module:qualname``, was made from, and the name warm reports it by
    ("module:attr"; None where it is the entry's). ``components_of(kernel)``: the kernel's
    key components today (the entry's signature and cc). Where no kernel of that name has
    the entry's components, one of them is returned (the caller words the change). Raises
    ``discover.find_kernel``'s LookupError when no kernel carries the name."""
    try:
        return discover.find_kernel(frontend, module, qualname), None
    except LookupError as exc:
        missing = exc  # a closure's "<locals>", or a function a module name jitted
    found = discover.kernels_named(frontend, module, f"{module.__name__}:{qualname}")
    if not found:
        raise missing
    if len(found) == 1:
        return found[0].dispatcher, found[0].name
    for kernel in found:
        if changed(expect, components_of(kernel.dispatcher)) is None:
            return kernel.dispatcher, kernel.name
    return found[0].dispatcher, None  # none is the entry's: named as the entry names it


def changed(expect: dict, now: dict) -> str | None:
    """What differs between an entry's components and the kernel's current ones, toolchain
    and launch configuration aside (dispatcher/misses.py words it); None if nothing."""
    from .misses import differences
    ignore = ("toolchain", "launch_config")
    old = {k: v for k, v in expect.items() if k not in ignore}
    new = {k: v for k, v in now.items() if k not in ignore}
    lines = differences(old, new)  # worded only the three shown (an entry's may be many)
    if not lines:
        return None
    more = f" (and {len(lines) - 3} more)" if len(lines) > 3 else ""
    return "; ".join(word() for word in lines[:3]) + more


def variant(expect: dict) -> str:
    """What tells apart the kernels of entries of one name, signature and cc (a factory's
    closures): their components but for the toolchain, as a key (``repr`` of a damaged
    entry's that no key encodes)."""
    from kcache import make_key
    kept = {k: v for k, v in expect.items() if k not in ("toolchain", "launch_config")}
    try:
        return make_key(kept)
    except Exception:  # an entry's text: any value msgpack gave
        return repr(kept)
