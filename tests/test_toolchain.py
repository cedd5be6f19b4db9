"""kcache.toolchain: package versions without numba, and the per-environment memo."""
import os
import sys

import pytest

from kcache import toolchain


def _counting(value):
    calls = []

    def compute():
        calls.append(1)
        return dict(value)
    return compute, calls


def test_memo_answers_without_recomputing(tmp_path):
    compute, calls = _counting({"numba": "1.0"})
    memo = tmp_path / toolchain.MEMO_NAME
    assert toolchain.memoized(memo, compute) == {"numba": "1.0"}
    assert toolchain.memoized(memo, compute) == {"numba": "1.0"}
    assert len(calls) == 1 and memo.exists()


def test_memo_recomputes_when_a_package_directory_changes(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setattr(sys, "path", [sys.path[0], str(site)])
    memo = tmp_path / toolchain.MEMO_NAME
    compute, calls = _counting({"numba": "1.0"})
    toolchain.memoized(memo, compute)
    # pip install/upgrade adds or removes a *.dist-info folder: the directory's mtime moves
    (site / "numba-2.0.dist-info").mkdir()
    os.utime(site, ns=(1, 1))
    upgraded, calls2 = _counting({"numba": "2.0"})
    assert toolchain.memoized(memo, upgraded) == {"numba": "2.0"}
    assert len(calls2) == 1


def test_memo_recomputes_when_the_distributions_change_under_the_same_mtime(tmp_path,
                                                                             monkeypatch):
    # Two images built with fixed timestamps (SOURCE_DATE_EPOCH) share a cache volume: the
    # same folders, the same mtimes, other packages. The second keyed with the first's
    # versions (stale kernels) while the memo went by mtimes alone.
    site = tmp_path / "site"
    (site / "numba_cuda-0.30.3.dist-info").mkdir(parents=True)
    os.utime(site, ns=(10**18, 10**18))
    monkeypatch.setattr(sys, "path", [sys.path[0], str(site)])
    memo = tmp_path / toolchain.MEMO_NAME
    toolchain.memoized(memo, _counting({"numba-cuda": "0.30.3"})[0])
    os.rename(site / "numba_cuda-0.30.3.dist-info", site / "numba_cuda-0.30.4.dist-info")
    os.utime(site, ns=(10**18, 10**18))
    other, calls = _counting({"numba-cuda": "0.30.4"})
    assert toolchain.memoized(memo, other) == {"numba-cuda": "0.30.4"}
    assert calls == [1]


def test_memo_recomputes_when_a_library_it_asked_is_replaced(tmp_path, monkeypatch):
    # A system CUDA toolkit upgraded in place: sys.path is untouched, libnvvm's file is not.
    monkeypatch.setattr(sys, "path", [sys.path[0]])
    lib = tmp_path / "libnvvm.so.4"
    lib.write_bytes(b"x" * 100)
    memo = tmp_path / toolchain.MEMO_NAME
    compute, calls = _counting({"nvvm": "13.0"})
    toolchain.memoized(memo, compute, files=lambda: [str(lib)])
    assert toolchain.memoized(memo, compute, files=lambda: [str(lib)]) == {"nvvm": "13.0"}
    assert calls == [1]
    st = lib.stat()
    lib.write_bytes(b"y" * 120)
    os.utime(lib, ns=(st.st_atime_ns, st.st_mtime_ns))  # a package keeping upstream times
    upgraded, calls2 = _counting({"nvvm": "13.1"})
    assert toolchain.memoized(memo, upgraded, files=lambda: [str(lib)]) == {"nvvm": "13.1"}
    assert calls2 == [1]


def test_the_key_toolchain_names_the_libraries_it_asked(tmp_path, monkeypatch):
    # Without NVVM/nvJitLink/NVRTC wheels the versions come from the libraries themselves:
    # their files are what the memo is valid for.
    from kcache.dispatcher import toolchain_versions as tv
    monkeypatch.setattr(tv, "_EXTRA_DISTS", {"numpy": ("numpy",)})
    monkeypatch.setattr(toolchain, "package_versions", lambda: {"python": "3"})
    monkeypatch.setattr(tv, "_nvvm_version", lambda: "13.9")
    monkeypatch.setattr(tv, "_nvjitlink_version", lambda: 1 / 0)
    monkeypatch.setattr(tv, "_nvrtc_version", lambda: "13.9")
    asked = []
    out = tv._toolchain(asked)
    assert out["nvvm"] == "13.9" and out["nvjitlink"] == "unavailable"
    assert asked == ["nvvm", "nvrtc"]
    found = tv._library_files(asked)
    pytest.importorskip("cuda.pathfinder")
    assert found and all(os.path.isabs(p) for p in found)


def test_memo_recomputes_for_another_interpreter(tmp_path, monkeypatch):
    memo = tmp_path / toolchain.MEMO_NAME
    toolchain.memoized(memo, _counting({"python": "3.11"})[0])
    monkeypatch.setattr(sys, "executable", "/opt/other/bin/python")
    other, calls = _counting({"python": "3.12"})
    assert toolchain.memoized(memo, other) == {"python": "3.12"}
    assert calls == [1]


def test_broken_or_unwritable_memo_is_only_a_recompute(tmp_path):
    memo = tmp_path / toolchain.MEMO_NAME
    memo.write_bytes(b"\xc1 not msgpack")
    compute, calls = _counting({"numba": "1.0"})
    assert toolchain.memoized(memo, compute) == {"numba": "1.0"}
    missing_dir = tmp_path / "no" / "such" / toolchain.MEMO_NAME
    assert toolchain.memoized(missing_dir, compute) == {"numba": "1.0"}
    assert len(calls) == 2 and not missing_dir.exists()


def test_a_memo_value_that_is_not_versions_is_recomputed_and_replaced(tmp_path):
    """A planted value with the current environment's state (a NaN, a nested list) would go
    into every key's components and make every put fail, in every process: recomputed."""
    import msgpack
    memo = tmp_path / toolchain.MEMO_NAME
    state = toolchain.environment_state()
    for bad in ({"numba": float("nan")}, {"numba": [[1]]}, {"numba": "x" * 1000}, {1: "1.0"}):
        memo.write_bytes(msgpack.packb([{"state": state, "value": bad}]))
        compute, calls = _counting({"numba": "1.0"})
        assert toolchain.memoized(memo, compute) == {"numba": "1.0"}
        assert toolchain.memoized(memo, compute) == {"numba": "1.0"}  # the memo was replaced
        assert calls == [1]


def test_package_versions_without_numba_import():
    versions = toolchain.package_versions()
    assert versions["python"].count(".") == 2 and "kcache-format" in versions


def test_the_memo_of_a_shared_root_is_readable_by_the_group(tmp_path, monkeypatch):
    """docs/security.md: in shared mode every file kcache makes is 0660 (the group reads
    what a member wrote); the toolchain memo was 0600, so another member could never read
    it and replaced it on every process. A private root keeps it 0600."""
    import stat

    from kcache import Entry, Store, make_key
    from kcache.dispatcher.options import toolchain_memo

    for shared, want in (("1", 0o660), ("", 0o600)):
        monkeypatch.setenv("KCACHE_SHARED", shared)
        store = Store(tmp_path / f"root{shared or 0}")
        assert store.put(make_key({"t": 1}), Entry({"cubin": b"x" * 64}, {"kernel": "m:k"}))
        memo = toolchain_memo(store)
        assert toolchain.memoized(memo, _counting({"numba": "1.0"})[0]) == {"numba": "1.0"}
        assert stat.S_IMODE(os.stat(memo).st_mode) == want, (shared, oct(os.stat(memo).st_mode))
