"""Dataclasses whose methods are written out (kcache.dispatcher.fingerprint.Fingerprint):
they must behave exactly as the methods
dataclasses generates, which this checks against a dataclass made from the same fields.
Adding a field without writing it into the methods fails here."""
import dataclasses
import inspect

import pytest

pytest.importorskip("numba.cuda")
from kcache.dispatcher.fingerprint import Fingerprint  # noqa: E402


def generated(cls):
    """A dataclass with ``cls``'s fields and __post_init__, frozen if ``cls`` is, its methods
    (__init__, __repr__, __eq__, __hash__) generated."""
    fields = [(f.name, f.type, dataclasses.field(default=f.default, default_factory=f.default_factory))
              for f in dataclasses.fields(cls)]
    namespace = {"__post_init__": cls.__post_init__} if hasattr(cls, "__post_init__") else {}
    return dataclasses.make_dataclass(cls.__name__, fields, namespace=namespace,
                                      frozen=cls.__dataclass_params__.frozen)


CASES = [
    (Fingerprint, [(("d",), {}), (("d", {"code": "x"}, ["why"], {"m.f": ("l",)}), {}),
                   ((), {"digest": "e", "lines": {}})]),
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

