"""Code analyses remembered across processes in the writable root (issue 36, "the key on a hit
costs less": dispatcher/fingerprint/remembered.py). Real processes and files: the first
process analyses and writes the memo at exit, the next reads it instead; keys are the same
either way; an edited kernel, another tag, a hostile or damaged memo file and a memo in a
read-only layer are never used; a read-only root writes nothing and fails nothing."""
import json
import os
import subprocess
import sys
import textwrap

import msgpack
import pytest


pytest.importorskip("numba.cuda")

N = 8  # kernels of the module: more than remembered.READ_FROM

CHILD = textwrap.dedent('''
    import json, sys
    root, layer, path = sys.argv[1], sys.argv[2], sys.argv[3]
    sys.path.insert(0, path)
    from numba import types
    from kcache import Store
    from kcache.dispatcher.fingerprint import code as _code
    from kcache.dispatcher.keying import kernel_key
    from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND
    import kernels
    import os
    from kcache.dispatcher.process import STATE
    if os.environ.get("MEMO_TAG"):  # a process of another kcache or Python
        STATE.keys.code_memo_tag = os.environ["MEMO_TAG"]
    if os.environ.get("DENY_WRITES"):  # as a read-only mount would (EROFS)
        real_open = os.open
        def deny_open(path, flags, *a, **kw):
            if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
                raise OSError(30, "Read-only file system", str(path))
            return real_open(path, flags, *a, **kw)
        def deny(*a, **kw):
            raise OSError(30, "Read-only file system")
        os.open = deny_open
        for name in ("replace", "rename", "mkdir", "unlink", "utime"):
            setattr(os, name, deny)
    analysed = []
    real = _code._chains  # the scan the memo spares (the content digest is made anyway)
    def counted(code):
        if code.co_filename == kernels.__file__:
            analysed.append(code.co_name)
        return real(code)
    _code._chains = counted
    store = Store(root, readonly_dirs=[layer] if layer else [])
    arr = types.Array(types.float32, 1, "C")
    per_key = os.environ.get("STORE_PER_KEY")  # as compile_for makes a store per call
    keys = [kernel_key(FRONTEND, k, (arr, arr), (9, 0),
                       store=Store(root) if per_key else store)[0]
            for k in kernels.KERNELS[:int(sys.argv[4])]]
    if os.environ.get("COUNT"):  # a counted lookup: the counters make the root at exit
        store.get("ab" * 32)
    if os.environ.get("SWAP_TO"):  # a group member swaps v1 for a symlink before the exit
        os.rename(os.path.join(root, "v1"), os.path.join(os.environ["SWAP_TO"], "v1"))
        os.symlink(os.path.join(os.environ["SWAP_TO"], "v1"), os.path.join(root, "v1"))
    print(json.dumps({"keys": keys, "analysed": analysed}))
''')

KERNEL = '''
@cuda.jit
def k{i}(x, out):
    j = cuda.grid(1)
    if j < out.size:
        out[j] = helpers.blend(x[j], {i}.5) + math.sqrt(x[j]) * SCALE
'''


def write_project(directory, body="", scale="2.0"):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "helpers.py").write_text(
        "from numba import cuda\n\n@cuda.jit(device=True)\ndef blend(a, b):\n"
        "    return a * 0.5 + b * 0.5\n")
    kernels = "import math\nfrom numba import cuda\nimport helpers\n\nSCALE = " + scale + "\n"
    kernels += "".join(KERNEL.format(i=i) for i in range(N)) + body
    kernels += f"\nKERNELS = [{', '.join(f'k{i}' for i in range(N))}]\n"
    (directory / "kernels.py").write_text(kernels)
    return directory


def keys_in_process(root, project, n=N, layer=None, env=None):
    proc = subprocess.run([sys.executable, "-c", CHILD, str(root), str(layer or ""),
                           str(project), str(n)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **(env or {})))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def memo_file(root, project):
    """The one memo file of the project's kernels.py (its name holds the tag too)."""
    [path] = (root / "v1" / "code").glob("*.msgpack")
    return path


@pytest.fixture
def used_root(tmp_path):
    root = tmp_path / "root"
    root.mkdir()  # a root that exists (the memo never creates one), with nothing in it yet
    return root


def test_no_memo_makes_a_root(tmp_path):
    project = write_project(tmp_path / "proj")
    keys_in_process(tmp_path / "absent", project)
    assert not (tmp_path / "absent").exists()


def test_a_root_made_by_the_counts_at_exit_gets_the_memo(tmp_path):
    # A process served from read-only layers alone (a container's first, on an empty
    # KCACHE_DIR) makes its root only when its counters are written at exit: the memo is
    # written after them, not lost for want of a root.
    project = write_project(tmp_path / "proj")
    first = keys_in_process(tmp_path / "fresh", project, env={"COUNT": "1"})
    assert memo_file(tmp_path / "fresh", project).is_file()
    again = keys_in_process(tmp_path / "fresh", project)
    assert again["keys"] == first["keys"] and again["analysed"] == ["k0", "k1", "k2"]


@pytest.fixture
def remembered(used_root, tmp_path):
    """A project, and its keys from a first process, which wrote the memo."""
    project = write_project(tmp_path / "proj")
    first = keys_in_process(used_root, project)
    assert sorted(first["analysed"]) == sorted(f"k{i}" for i in range(N))
    assert memo_file(used_root, project).is_file()
    return used_root, project, first["keys"]


def test_the_next_process_reads_the_analyses_and_gets_the_same_keys(remembered):
    root, project, keys = remembered
    again = keys_in_process(root, project)
    assert again["keys"] == keys
    # from the READ_FROM-th kernel of the file on, nothing is analysed again
    assert again["analysed"] == ["k0", "k1", "k2"]
    before = memo_file(root, project).stat().st_mtime_ns
    keys_in_process(root, project)
    assert memo_file(root, project).stat().st_mtime_ns == before  # a warm process writes none


def test_a_process_of_few_kernels_reads_no_memo(remembered):
    root, project, keys = remembered
    memo_file(root, project).write_bytes(b"\xc1" * 10)  # would be ignored if read: it is not
    few = keys_in_process(root, project, n=3)
    assert few["keys"] == keys[:3] and few["analysed"] == ["k0", "k1", "k2"]


def test_an_edited_kernel_is_analysed_again_and_keyed_by_its_new_code(remembered, tmp_path):
    root, project, keys = remembered
    edited = (project / "kernels.py").read_text().replace("{}.5) + math".format(5), "5.75) + math")
    assert edited != (project / "kernels.py").read_text()
    (project / "kernels.py").write_text(edited)
    again = keys_in_process(root, project)
    assert again["keys"][5] != keys[5] and again["keys"][:5] == keys[:5]
    assert "k5" in again["analysed"]
    fresh = keys_in_process(tmp_path / "none", project)  # no memo anywhere
    assert fresh["keys"] == again["keys"]


def test_a_global_changed_elsewhere_still_changes_every_key(remembered):
    # the memo holds what the code reads, never the values read: SCALE's is read afresh
    root, project, keys = remembered
    text = (project / "kernels.py").read_text().replace("SCALE = 2.0", "SCALE = 3.0")
    (project / "kernels.py").write_text(text)
    again = keys_in_process(root, project)
    assert all(a != b for a, b in zip(again["keys"], keys))


def _records(root, project):
    return msgpack.unpackb(memo_file(root, project).read_bytes(), raw=False)


def _damage(root, project, how):
    path = memo_file(root, project)
    data = _records(root, project)
    first = next(iter(data["records"]))
    if how == "tag":
        data["tag"] = "0" * 32
    elif how == "drop-callee":  # what a planted record would do: forget helpers.blend
        chains = msgpack.unpackb(data["records"][first], raw=False)
        data["records"] = {d: msgpack.packb([c for c in msgpack.unpackb(r, raw=False)
                                             if c[1] != "helpers"])
                           for d, r in data["records"].items()}
        assert any(c[1] == "helpers" for c in chains)
    elif how == "shapes":
        bad = [[1, [], []], ["x" * 5000, []], ["g", "n", [1]], "text"]
        data["records"] = {d: (msgpack.packb(bad) if i % 3 == 0 else
                               r.decode("latin-1") if i % 3 == 1 else [r, r])
                           for i, (d, r) in enumerate(data["records"].items())}
    path.write_bytes(msgpack.packb(data, use_bin_type=True))


@pytest.mark.parametrize("how", ["tag", "shapes"])
def test_a_damaged_memo_is_analysed_around(remembered, how):
    root, project, keys = remembered
    _damage(root, project, how)
    again = keys_in_process(root, project)
    assert again["keys"] == keys
    assert len(again["analysed"]) == N  # nothing of it used


@pytest.mark.parametrize("what", ["fifo", "symlink", "garbage", "sparse", "group-writable"])
def test_a_hostile_memo_file_is_never_read(remembered, tmp_path, what):
    root, project, keys = remembered
    path = memo_file(root, project)
    path.unlink()
    if what == "fifo":
        os.mkfifo(path, 0o600)
    elif what == "symlink":
        outside = tmp_path / "outside.msgpack"
        outside.write_bytes(b"\xc1")
        os.symlink(outside, path)
    elif what == "garbage":
        path.write_bytes(b"\x91" * 100_000 + b"\xc0")
    elif what == "sparse":
        with open(path, "wb") as f:
            f.truncate(4 << 30)
    else:
        path.write_bytes(b"\x80")
        os.chmod(path, 0o666)
    again = keys_in_process(root, project)
    assert again["keys"] == keys and len(again["analysed"]) == N


#: A package that imports a submodule when an attribute of that name is read (PEP 562, as
#: numpy's and scipy's lazy submodules); importing ``boom`` leaves a marker file.
LAZY_INIT = ("import importlib\n\n\ndef __getattr__(name):\n"
             "    return importlib.import_module(__name__ + '.' + name)\n")
BOOM = "import pathlib\npathlib.Path(__file__).with_name('imported').write_text('boom')\n"


def test_a_record_naming_what_its_code_never_loads_is_not_used(used_root, tmp_path):
    """A record read back may name only what its code object loads (its globals, closure
    variables and attribute names): a chain planted in the root (a group member of a shared
    one, a damaged file) through a package the module imported made the walk read an
    attribute the kernels never name, and the package's lazy ``__getattr__`` imported a
    module of the memo's choosing. Real processes and files."""
    project = write_project(tmp_path / "proj", body="\nimport lazypkg\n")
    (project / "lazypkg").mkdir()
    (project / "lazypkg" / "__init__.py").write_text(LAZY_INIT)
    (project / "lazypkg" / "boom.py").write_text(BOOM)
    keys = keys_in_process(used_root, project)["keys"]
    path = memo_file(used_root, project)
    data = _records(used_root, project)
    data["records"] = {d: msgpack.packb(msgpack.unpackb(r, raw=False) + [["g", "lazypkg",
                                                                          ["boom"]]])
                       for d, r in data["records"].items()}
    path.write_bytes(msgpack.packb(data, use_bin_type=True))
    again = keys_in_process(used_root, project)
    assert not (project / "lazypkg" / "imported").exists()
    assert again["keys"] == keys and len(again["analysed"]) == N  # analysed, not read


def test_a_memo_in_a_read_only_layer_is_never_read(remembered, tmp_path):
    # a planted record could drop a callee from a key: only the writable root's are read
    root, project, keys = remembered
    _damage(root, project, "drop-callee")
    layer = tmp_path / "layer"
    os.rename(root, layer)
    fresh_root = tmp_path / "fresh"
    fresh_root.mkdir()
    again = keys_in_process(fresh_root, project, layer=layer)
    assert again["keys"] == keys and len(again["analysed"]) == N


def test_a_planted_record_in_the_writable_root_is_the_roots_trust(remembered):
    # The writable root is trusted as its entries are (whoever can write it can plant an
    # entry under any key): a record read from it is used. This pins where the line is.
    root, project, keys = remembered
    _damage(root, project, "drop-callee")
    again = keys_in_process(root, project)
    assert again["keys"][5] != keys[5]


def test_a_read_only_root_writes_no_memo_and_fails_nothing(used_root, tmp_path):
    project = write_project(tmp_path / "proj")
    result = keys_in_process(used_root, project, env={"DENY_WRITES": "1"})
    assert len(result["keys"]) == N and not (used_root / "v1" / "code").exists()
    assert result["keys"] == keys_in_process(used_root, project)["keys"]


def test_processes_writing_at_once_leave_a_whole_memo(used_root, tmp_path):
    project = write_project(tmp_path / "proj")
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(used_root), "", str(project),
                               str(N)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    data = _records(used_root, project)
    assert len(data["records"]) == N
    assert keys_in_process(used_root, project)["analysed"] == ["k0", "k1", "k2"]


def test_a_folder_swapped_for_a_symlink_before_the_exit_gets_no_memo(used_root, tmp_path):
    # the write at exit checks the folders it walks: never through the symlink, out of the root
    project = write_project(tmp_path / "proj")
    keys_in_process(used_root, project)  # v1/code made
    outside = tmp_path / "outside"
    outside.mkdir()
    # another tag: the process opens v1/code to read, finds nothing of its own, analyses,
    # and has a file to write when it exits, after the swap
    keys_in_process(used_root, project, env={"SWAP_TO": str(outside), "MEMO_TAG": "c" * 32})
    assert len(list((outside / "v1" / "code").iterdir())) == 1  # the first process's only


def test_processes_of_two_tags_keep_a_file_each(used_root, tmp_path):
    project = write_project(tmp_path / "proj")
    for tag in ("a" * 32, "b" * 32, "a" * 32):
        run = keys_in_process(used_root, project, env={"MEMO_TAG": tag})
    assert run["analysed"] == ["k0", "k1", "k2"]  # a's file was left to it by b
    assert len(list((used_root / "v1" / "code").glob("*.msgpack"))) == 2


def test_the_tag_is_the_analysing_source(tmp_path, monkeypatch):
    # a change anywhere in the analysing modules (a module-level constant too) is another tag
    from kcache.dispatcher.fingerprint import remembered
    from kcache.dispatcher.process import STATE
    probe = tmp_path / "memo_probe.py"
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(remembered, "_ANALYSERS", remembered._ANALYSERS + ("memo_probe",))
    tags = []
    for text in ("_SHIFT = 1\n", "_SHIFT = 0\n"):
        probe.write_text(text)
        monkeypatch.setattr(STATE.keys, "code_memo_tag", None)
        tags.append(remembered._tag())
    assert tags[0] and tags[1] and tags[0] != tags[1]
    monkeypatch.setattr(remembered, "_ANALYSERS", ("no_such_module_here",))
    monkeypatch.setattr(STATE.keys, "code_memo_tag", None)
    assert remembered._tag() is None  # no source: no memo at all


def test_few_kernels_or_code_without_a_file_write_nothing(used_root, tmp_path):
    project = write_project(tmp_path / "proj")
    keys_in_process(used_root, project, n=3)
    assert not (used_root / "v1" / "code").exists()
    # kernels exec'd from a string: no file of their own, nothing remembered
    text = (project / "kernels.py").read_text()
    (project / "kernels.py").write_text("exec(compile(" + repr(text) + ", '<string>', 'exec'))\n")
    run = keys_in_process(used_root, project)
    assert len(run["keys"]) == N and not (used_root / "v1" / "code").exists()


def test_clear_removes_the_memo(remembered):
    root, project, _keys = remembered
    proc = subprocess.run([sys.executable, "-m", "kcache", "clear", "--yes", "--dir", str(root)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert list((root / "v1" / "code").iterdir()) == []
    assert "file of remembered code analyses" in proc.stderr  # said, apart from the entries


def test_clear_json_counts_the_memo_apart_from_the_entries(remembered):
    root, _project, _keys = remembered
    files = list((root / "v1" / "code").iterdir())
    size = sum(f.stat().st_size for f in files)
    proc = subprocess.run([sys.executable, "-m", "kcache", "clear", "--yes", "--json", "--dir",
                           str(root)], capture_output=True, text=True, timeout=120)
    out = json.loads(proc.stdout)
    assert (out["code_memos_removed"], out["code_memo_bytes_freed"]) == (len(files), size) != (0, 0)
    assert (out["removed"], out["bytes_freed"]) == (0, 0)  # keys only: no entry was stored


def test_stats_counts_the_memo_and_prune_older_than_costs_one_analysis_not_a_key(remembered):
    from kcache import Store
    root, project, keys = remembered
    path = memo_file(root, project)
    st = Store(root).stats()
    assert (st.code_memo_files, st.code_memo_bytes) == (1, path.stat().st_size)
    assert Store(root).prune(older_than="1d").code_memos == (0, 0) and path.exists()  # fresh
    os.utime(path, (path.stat().st_atime, path.stat().st_mtime - 2 * 86400))
    assert Store(root).prune(older_than="1d").code_memos == (1, st.code_memo_bytes)
    assert not path.exists()
    again = keys_in_process(root, project)  # analyses again, and writes the memo anew
    assert again["keys"] == keys and sorted(again["analysed"]) == sorted(f"k{i}" for i in range(N))
    assert memo_file(root, project).is_file()


def test_a_memo_in_use_is_touched_so_prune_older_than_keeps_it(remembered):
    # A complete memo is never rewritten: a process that reads it touches it (when it is a
    # day old or more), so its time is its last use and prune removes only unused ones.
    from kcache import Store
    root, project, keys = remembered
    path = memo_file(root, project)
    old = path.stat().st_mtime - 40 * 86400
    os.utime(path, (old, old))
    assert keys_in_process(root, project)["keys"] == keys  # reads it, analyses none new
    assert path.stat().st_mtime > old + 39 * 86400
    assert Store(root).prune(older_than="30d").code_memos == (0, 0) and path.exists()


def test_a_file_keeps_what_its_writer_used_and_made_and_the_newest_rest():
    from kcache.dispatcher.fingerprint import remembered as R
    used = {b"u%d" % i for i in range(300)}
    new = {b"n0": ()}
    old = {b"r%d" % i: b"\x90" for i in range(2000)}
    old.update({b"u%d" % i: b"\x91\x90" for i in range(300)})
    kept = R._records(old, 300, used, new)  # 300 kernels keyed: room for 1,200
    assert len(kept) == 1200
    assert all(b"u%d" % i in kept for i in range(300)) and b"n0" in kept
    assert b"r1999" in kept and b"r0" not in kept  # the newest of the rest


def test_a_store_per_key_shares_the_roots_memo(used_root, tmp_path):
    # kcache.compile_for without store= makes a Store per call: the memo is the root's
    project = write_project(tmp_path / "proj")
    first = keys_in_process(used_root, project, env={"STORE_PER_KEY": "1"})
    again = keys_in_process(used_root, project, env={"STORE_PER_KEY": "1"})
    assert again["keys"] == first["keys"] and again["analysed"] == ["k0", "k1", "k2"]
