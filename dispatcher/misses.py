"""Why a kernel missed: compare its key components with the nearest entry of the same kernel.

Used for ``KCACHE_EXPLAIN=1`` and ``kcache.explain``.  The lines name components the way
docs/keys.md describes them, e.g. ``dependency mathbits.step changed``, ``cc sm_80 -> sm_90a``,
``nvvm 13.0.88 -> 13.5.37``, ``global SCALE changed``, ``option fastmath False -> True``,
``signature: argument 2 float32[::1] -> float64[::1]``.
"""

from __future__ import annotations

from kcache.text import QUOTE_LIMIT, cut

__all__ = ["diff_components", "differences", "explain_miss", "one_line", "subject",
           "MAX_SHOWN"]

#: Differences named for one miss; more are counted ("... and 12 more"). An entry may come
#: from a bundle or another machine: its names and values are escaped and cut (kcache.text).
MAX_SHOWN = 8

# Component order in explain output: the most likely causes first.
_ORDER = ("frontend", "kernel", "source", "extensions", "signature", "target", "options", "config",
          "link", "launch_config", "cache_key", "toolchain", "format")


def diff_components(old: dict, new: dict, frontend=None) -> list[str]:
    """Human-readable differences from ``old`` to ``new`` (two components dicts).

    Returns one line per differing leaf, ordered source, extensions, signature, target,
    options, numba config, link, launch config, cache_key, toolchain; an empty list when they
    are equal.  Unknown
    top-level keys are compared too ("<name> changed").  Never raises on malformed input.
    ``frontend`` (a ``frontends.base.Frontend``): puts a signature's arguments in its short
    form (``float32[::1]``); without one they are shown as the component holds them.
    """
    return [word() for word in differences(old, new, frontend)]


def differences(old: dict, new: dict, frontend=None) -> list:
    """:func:`diff_components`'s lines, each a function of no argument that words it: only
    the lines shown are worded (escaped and cut), so ranking entries that each differ in
    100,000 places costs a comparison per place, not a message."""
    old = old if isinstance(old, dict) else {}
    new = new if isinstance(new, dict) else {}
    keys = [k for k in _ORDER if k in old or k in new]
    keys += sorted((set(old) | set(new)) - set(_ORDER) - {"opaque"}, key=str)
    lines: list = []
    for key in keys:
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        differ = _DIFFERS.get(key)
        if key == "extensions":  # present only in processes with user extensions
            a, b = a if isinstance(a, dict) else {}, b if isinstance(b, dict) else {}
        # (default arguments bind each line's values now: a closure would see the last ones)
        if key == "target" and isinstance(a, dict) and isinstance(b, dict):
            lines.extend(_target(a, b, frontend))
        elif differ is not None and isinstance(a, dict) and isinstance(b, dict):
            lines.extend(differ(a, b))
        elif key == "signature":
            lines.extend(_signature(a, b, frontend))
        elif key == "cache_key":
            lines.append(lambda a=a, b=b: f"cache_key {_short(a, QUOTE_LIMIT)} -> "
                                          f"{_short(b, QUOTE_LIMIT)}")
        elif key == "launch_config":
            lines.append(lambda a=a, b=b: f"launch config {cut(a)} -> {cut(b)}")
        else:
            lines.append(lambda k=key, a=a, b=b: f"{cut(k)} {_short(a)} -> {_short(b)}")
    return lines


def explain_miss(store, components: dict, frontend=None, entries=None) -> list[str]:
    """Explain a miss: diff ``components`` against the nearest entry of the same kernel.

    ``store``: a ``kcache.Store`` (only ``entries()`` is used: headers, no payloads).  The
    nearest entry is the one with the fewest differing lines, the most recently used first
    on a tie.  Returns ``["no entry of this kernel yet"]`` when the store holds none, and a
    single line saying so when an entry with identical components exists (the key scheme
    itself changed).  A store that cannot be read gives one line naming the error.  At most
    MAX_SHOWN differences, then ``"and N more"``; every name and value from an entry escaped
    and at most 200 characters (kcache.text.cut). ``frontend``: as :func:`diff_components`'.
    ``entries``: the store's ``entries()`` listed once by a caller explaining many misses.
    """
    kernel = components.get("kernel")
    best = None
    try:
        for info in store.entries() if entries is None else entries:
            theirs = getattr(info, "components", None)
            if not isinstance(theirs, dict) or theirs.get("kernel") != kernel:
                continue
            lines = differences(theirs, components, frontend)
            rank = (len(lines), -float(getattr(info, "last_used", 0) or 0))
            if best is None or rank < best[0]:
                best = (rank, lines, info)
    except Exception as exc:  # a broken cache never breaks the program, explain included
        return [f"cannot read the cache to explain the miss: {cut(exc)}"]
    if best is None:
        return ["no entry of this kernel yet"]
    _rank, lines, info = best
    if not lines:
        return [f"entry {cut(getattr(info, 'key', '?'), 16)} has the same components "
                "(the key scheme changed or the entry is unreadable)"]
    shown = [word() for word in lines[:MAX_SHOWN]]
    return shown + [f"and {len(lines) - MAX_SHOWN} more"] if len(lines) > MAX_SHOWN else shown


def subject(frontend, name: str, display: str, components) -> str:
    """What an explanation line is about: ``"mod:kernel (argument types) for sm_90a"``, the
    arch the front-end compiles the key's cc for (as ``compile_for``'s lines say it; two ccs
    in one process would be told apart by nothing else); without ``for`` when the
    components name no cc."""
    target = components.get("target") if isinstance(components, dict) else None
    cc = target.get("cc") if isinstance(target, dict) else None
    try:
        arch = frontend.arch_name(cc) if cc and frontend is not None else None
    except Exception:  # a cc no arch is known for: the line without it
        arch = None
    return f"{name} {display}" + (f" for {arch}" if arch else "")


def one_line(lines) -> str:
    """The lines of :func:`explain_miss` as the one line a miss logs and an exception quotes."""
    return "; ".join(lines)


# --- per-component differs ------------------------------------------------------------------


def _source(a: dict, b: dict) -> list:
    lines = []
    for name in sorted(set(a) | set(b), key=_part_order):
        if a.get(name) == b.get(name):
            continue
        if name not in a:
            lines.append(lambda name=name: f"new {_part_label(name)}")
        elif name not in b:
            lines.append(lambda name=name: f"{_part_label(name)} removed")
        else:
            lines.append(lambda name=name: f"{_part_label(name)} changed")
    return lines


def _part_order(name: str):
    prefix = name.partition(":")[0]
    rank = {"code": 0, "lines": 1, "closure": 2, "default": 3, "dep": 4, "global": 5,
            "attr": 6}.get(prefix, 7)
    return (rank, name)


_PART_WORDS = {"closure": "closure variable", "default": "default of argument",
               "dep": "dependency", "global": "global", "attr": "module attribute"}


def _part_label(name: str) -> str:
    prefix, _, rest = name.partition(":")
    if name == "code":
        return "code"
    if name == "lines":
        return "line numbers (debug/lineinfo kernel)"
    if prefix == "lines":
        return f"line numbers of {cut(rest)} (compiled with line info)"
    words = _PART_WORDS.get(prefix)
    return f"{words} {cut(rest)}" if words else f"source part {cut(name)}"


#: Characters of one argument's type in a signature line (a record's may be long).
_ARG_LIMIT = 60


def _signature(a, b, frontend) -> list:
    """The arguments whose types differ, one line each, in numba's short form where it has
    one (``signature: argument 2 float32[::1] -> float64[::1]``); both whole signatures when
    the argument counts differ or a value is not a signature text. Arguments are compared as
    text (numba's repr names a type fully); only the lines shown are put in short form."""
    old, new = _split(a), _split(b)
    if old is None or new is None or len(old) != len(new):
        return [lambda: f"signature {_whole(frontend, a, old)} -> {_whole(frontend, b, new)}"]
    lines = [lambda n=n, x=x, y=y: (f"signature: argument {n} {_argument(frontend, x)} -> "
                                    f"{_argument(frontend, y)}")
             for n, (x, y) in enumerate(zip(old, new), 1) if x != y]
    return lines or [lambda: f"signature {cut(a)} -> {cut(b)}"]  # split alike: say all


def _split(text) -> list | None:
    """A ``signature`` component (``str`` of the types tuple: ``"(Array(float32, 1, 'C',
    False, aligned=True), int64)"``) split at its top-level commas; None for a value that is
    not such a text."""
    if not isinstance(text, str):
        return None
    inner = text.strip()
    if not (inner.startswith("(") and inner.endswith(")")):
        return None
    parts, depth, start = [], 0, 1
    for i in range(1, len(inner) - 1):
        char = inner[i]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(inner[start:i].strip())
            start = i + 1
    parts.append(inner[start:-1].strip())
    return [p for p in parts if p]  # "(x,)": nothing after the comma


def _whole(frontend, text, parts) -> str:
    if parts is None:
        return cut(text)
    return cut(f"({', '.join(_argument(frontend, p) for p in parts[:MAX_SHOWN])}"
               f"{', ...' if len(parts) > MAX_SHOWN else ''})")


def _argument(frontend, text: str) -> str:
    """One argument's type in numba's short form (``float32[::1]``,
    kcache.dispatcher.sigspec.format_type) when its text reads back to exactly that type,
    else the text itself (and without a ``frontend``); escaped, at most :data:`_ARG_LIMIT`
    characters."""
    if frontend is None:
        return cut(text, _ARG_LIMIT)
    from . import sigspec  # numba types: only for a line shown
    found = sigspec.from_signature_component(frontend, f"({text},)")
    if found is not None and len(found) == 1:
        try:
            text = sigspec.format_type(frontend, found[0])
        except Exception:  # a type with no short form: its repr, as written
            pass
    return cut(text, _ARG_LIMIT)


def _target(a: dict, b: dict, frontend=None) -> list:
    def shown(name, value):
        if name == "cc" and frontend is not None and isinstance(value, str):
            try:  # the arch the front-end compiles (numba-cuda-mlir: sm_90 for target sm_90a)
                return frontend.arch_name(value)
            except Exception:  # an entry's text that is no cc: shown as it is
                pass
        return cut(value)
    return [lambda n=name: f"{cut(n)} {shown(n, a.get(n))} -> {shown(n, b.get(n))}"
            for name in sorted(set(a) | set(b)) if a.get(name) != b.get(name)]


def _versions(a: dict, b: dict) -> list:
    def word(name):
        x, y = a.get(name), b.get(name)
        return (f"{cut(name)} {cut(x) if x is not None else '(none)'} -> "
                f"{cut(y) if y is not None else '(none)'}")
    return [lambda n=name: word(n) for name in sorted(set(a) | set(b))
            if a.get(name) != b.get(name)]


def _options(a: dict, b: dict, what: str = "option") -> list:
    def word(name):
        return (f"{what} {cut(name)} {_short(a.get(name, '(unset)'))} -> "
                f"{_short(b.get(name, '(unset)'))}")
    return [lambda n=name: word(n) for name in sorted(set(a) | set(b))
            if a.get(name, "(unset)") != b.get(name, "(unset)")]


def _config(a: dict, b: dict) -> list:
    return _options(a, b, "numba config")


def _named_changes(names, a: dict, b: dict, what: str) -> list:
    """One line per name of ``names`` whose value differs between ``a`` and ``b``:
    "<what> X removed", "new <what> X", "<what> X changed"."""
    lines = []
    for name in names:
        if name not in b:
            lines.append(lambda n=name: f"{what} {cut(n)} removed")
        elif name not in a:
            lines.append(lambda n=name: f"new {what} {cut(n)}")
        elif a[name] != b[name]:
            lines.append(lambda n=name: f"{what} {cut(n)} changed")
    return lines


def _link(a: dict, b: dict) -> list:
    return _named_changes(list(a) + [n for n in b if n not in a], a, b, "link file")


def _extensions(a: dict, b: dict) -> list:
    return _named_changes(sorted(set(a) | set(b), key=str), a, b, "extensions registered by")


_DIFFERS = {"source": _source, "toolchain": _versions,
            "options": _options, "config": _config, "link": _link,
            "extensions": _extensions}


def _short(value, limit: int = 60) -> str:
    """``value`` as its repr, at most ``limit`` characters (escaped: it may be an entry's)."""
    if isinstance(value, str):
        if value.startswith("digest:"):
            return cut(value[:19])  # an option hashed by content: its digest prefix is enough
        value = value[:limit]  # a 10 MB string is not copied whole into its repr
    text = repr(value)  # escaped: the types msgpack decodes to have printable reprs
    return text if len(text) <= limit else text[: limit - 3] + "..."
