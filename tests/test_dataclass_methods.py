"""Dataclasses whose methods are written out (kcache.entry.Entry, kcache.config.Settings:
every process that defines a kernel imports them, and generating the methods costs ~2.5 ms
of exec): they must behave exactly as the methods
dataclasses generates, which this checks against a dataclass made from the same fields.
Adding a field without writing it into the methods fails here."""
import dataclasses
import inspect
from pathlib import Path

import pytest

from kcache.config import Settings
from kcache.entry import Entry


def generated(cls):
    """A dataclass with ``cls``'s fields and __post_init__, frozen if ``cls`` is, its methods
    (__init__, __repr__, __eq__, __hash__) generated."""
    fields = [(f.name, f.type, dataclasses.field(default=f.default, default_factory=f.default_factory))
              for f in dataclasses.fields(cls)]
    namespace = {"__post_init__": cls.__post_init__} if hasattr(cls, "__post_init__") else {}
    return dataclasses.make_dataclass(cls.__name__, fields, namespace=namespace,
                                      frozen=cls.__dataclass_params__.frozen)


SETTINGS = dict(root=Path("/r"), max_size=1, readonly_roots=(Path("/a"),), lock_timeout=2.0,
                disabled=False, shared=True, origins={"root": "argument"})
CASES = [
    (Entry, [(({"cubin": b"x"},), {}), (({"cubin": bytearray(b"y")}, {"k": 1}), {}),
             ((), {"artifacts": {}, "meta": None})]),
    (Settings, [((), SETTINGS), ((), dict(SETTINGS, max_entry_size=5, config={"shared": True})),
                (tuple(SETTINGS.values()) + (7, 8.0, 9.0, {"a": 1}), {})]),
]


@pytest.mark.parametrize("cls, calls", CASES, ids=[c.__name__ for c, _ in CASES])
def test_written_out_methods_match_the_generated_ones(cls, calls):
    ref = generated(cls)
    assert dataclasses.is_dataclass(cls)
    assert [f.name for f in dataclasses.fields(cls)] == [f.name for f in dataclasses.fields(ref)]
    mine, theirs = inspect.signature(cls), inspect.signature(ref)
    assert list(mine.parameters.values()) == list(theirs.parameters.values())
    assert cls.__match_args__ == ref.__match_args__
    assert (cls.__hash__ is None) == (ref.__hash__ is None)
    made = []
    for args, kwargs in calls:
        a, b = cls(*args, **kwargs), ref(*args, **kwargs)
        assert repr(a) == repr(b)
        assert dataclasses.asdict(a) == dataclasses.asdict(b)
        assert a == cls(*args, **kwargs) and not a != cls(*args, **kwargs)
        assert a.__eq__(b) is NotImplemented and a.__eq__(object()) is NotImplemented
        first = dataclasses.fields(cls)[0].name
        changed = {first: {"ptx": b"p"} if first == "artifacts" else "z"}
        assert not a == dataclasses.replace(a, **changed) and a != dataclasses.replace(a, **changed)
        assert (a == dataclasses.replace(a, **changed)) == (b == dataclasses.replace(b, **changed))
        if cls.__hash__ is not None:
            try:
                expected = hash(b)
            except TypeError:
                with pytest.raises(TypeError):
                    hash(a)
            else:
                assert hash(a) == expected
        made.append(a)
    # every default factory gives a fresh object
    for name in (f.name for f in dataclasses.fields(cls) if f.default_factory is not dataclasses.MISSING):
        args, kwargs = calls[0]
        assert getattr(cls(*args, **kwargs), name) is not getattr(cls(*args, **kwargs), name)
    if cls.__dataclass_params__.frozen:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(made[0], "digest", "x")


def test_recursive_repr_and_post_init_errors_match():
    ref = generated(Entry)
    a, b = Entry({}), ref({})
    a.meta["self"], b.meta["self"] = a, b
    assert repr(a) == repr(b)  # Entry(artifacts={}, meta={'self': ...})
    for bad in ([], {"cubin": "text"}, {1: b""}):
        with pytest.raises(TypeError) as mine:
            Entry(bad)
        with pytest.raises(TypeError) as theirs:
            ref(bad)
        assert str(mine.value) == str(theirs.value)
