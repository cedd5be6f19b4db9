"""docs/containers.md, tested: its Dockerfile carried out without Docker (tests/dockerrecipe.py:
every stage in a fresh folder of its own, every RUN in a subprocess, the runtime stages as a
user made by the test when run as root), no GPU; and read-only layers as images hold them: on a
read-only file system (a read-only bind mount in a private mount namespace, else writes made
to fail with EROFS), owned by the build user (refused, one warning) or by root (trusted)."""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("numba.cuda")

import userkit  # noqa: E402
from dockerrecipe import Build, RecipeError, blocks, parse_build_lines  # noqa: E402
from kcache import Store  # noqa: E402
from trustkit import entry, key, readonly_env, snapshot  # noqa: E402

pytestmark = pytest.mark.slow  # builds the documented container recipe

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "containers.md"
DOCKERFILE_MARK = "tests/test_containers.py runs this Dockerfile"
BUILD_LINES_MARK = "tests/test_containers.py reads the docker build lines"
LOG_MARK = "What each step prints in the build log"
SECRET = "the build secret of tests/test_containers.py"
KERNELS = {"examples.kernels:scaled_add", "examples.kernels:clamp_square",
           "examples.kernels:block_sum"}


# --- the Dockerfile ------------------------------------------------------------------------------

class Recipe:
    """The recipe built once: ``stages`` {target: Stage}, ``builder``, ``users``, ``base``."""


def _can_use_users() -> bool:
    return userkit.IS_ROOT and shutil.which("useradd") is not None


@pytest.fixture(scope="module")
def recipe():
    text = DOC.read_text()
    lines = parse_build_lines(blocks(text, BUILD_LINES_MARK))
    assert [line.target for line in lines] == ["runtime-layer", "runtime-bundle", "runtime-onefile"]
    base = (userkit.shared_base("kcache-recipe-") if _can_use_users()
            else Path(tempfile.mkdtemp(prefix="kcache-recipe-")))
    try:
        with contextlib.ExitStack() as stack:
            users = stack.enter_context(userkit.users("app")) if _can_use_users() else {}
            mounts = base / "mounts"
            mounts.mkdir(mode=0o700)
            if users:
                userkit.probe(users["app"], mounts, {"PATH": os.environ.get("PATH", "")})
            context = base / "context"
            shutil.copytree(REPO / "examples", context / "examples",
                            ignore=shutil.ignore_patterns("__pycache__"))
            (context / "requirements.txt").write_text("kcache-cuda[cu13,zstd]\n")
            r = Recipe()
            r.base, r.users, r.lines = base, users, {line.target: line for line in lines}
            r.builder = Build(blocks(text, DOCKERFILE_MARK), base=base, context=context,
                              users=users, host_env={"KCACHE_SECRET": SECRET}, stage_dir=mounts)
            r.stages = {line.target: r.builder.build(line) for line in lines}
            yield r
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _log(stage, needle: str):
    """The (instruction, process) of the RUN whose command contains ``needle``."""
    found = [(ins, done) for ins, done in stage.log if needle in ins.text]
    assert len(found) == 1, [ins.text for ins, _d in stage.log]
    return found[0]


def _tsv(stdout: str, header: str) -> list[dict]:
    """The rows of the plain table that starts with ``header`` (tab-separated)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    names = lines[start].split("\t")
    rows = []
    for line in lines[start + 1:]:
        cells = line.split("\t")
        if len(cells) != len(names):
            break
        rows.append(dict(zip(names, cells)))
    return rows


def _keys(root: Path) -> set:
    entries = root / "v1" / "entries"
    return {p.stem for p in entries.rglob("*.kce")} if entries.exists() else set()


def _build_keys(r) -> set:
    return _keys(r.builder.built["build"].root / "opt" / "kcache")


def test_build_stage_warms_every_kernel_for_both_ccs(recipe):
    build = recipe.builder.built["build"]
    _ins, done = _log(build, "kcache warm")
    assert re.search(r"kcache: warm: 6 compiled, 0 already cached, 0 failed in ", done.stderr)
    assert len(_build_keys(recipe)) == 6
    assert build.args["KCACHE_CCS"] == recipe.lines["runtime-layer"].build_args["KCACHE_CCS"]


def test_the_layer_is_root_owned_and_not_writable_by_others(recipe):
    layer = recipe.stages["runtime-layer"].root / "opt" / "kcache"
    assert _keys(layer) == _build_keys(recipe)
    for path in [layer, *layer.rglob("*")]:
        st = path.lstat()
        mode = stat.S_IMODE(st.st_mode)
        assert not mode & 0o022, (path, oct(mode))
        assert mode & 0o444 == 0o444, (path, oct(mode))  # readable by the runtime user
        if userkit.IS_ROOT:
            assert st.st_uid == 0, path


@pytest.mark.parametrize("target", ["runtime-layer", "runtime-bundle", "runtime-onefile"])
def test_runtime_stage_finds_every_kernel_as_the_runtime_user(recipe, target):
    stage = recipe.stages[target]
    _ins, done = _log(stage, "--check")
    # nothing but warm's progress and summary and ls' total: no warning (trust, KCACHE_ENABLE)
    assert all(line.startswith(("kcache: warm: ", "kcache: imported "))
               or re.fullmatch(r"kcache: \d+ entr(y|ies), [\d.]+ \w?i?B", line)
               or re.fullmatch(r"kcache: 6 of them from the read-only layer /\S+ \((folder|bundle "
                               r"format 3, 6 entries)\)", line)
               for line in done.stderr.splitlines()), done.stderr
    listed = _tsv(done.stdout, "short_key\tkernel")
    assert {row["kernel"] for row in listed} == KERNELS and len(listed) == 6
    planned = _tsv(done.stdout, "kernel\tdisplay")
    assert {row["status"] for row in planned} == {"cached"}, planned
    assert {row["arch"] for row in planned} == {"sm_80", "sm_90a"}
    assert {row["key"] for row in planned} == _build_keys(recipe)  # the build stage's keys
    assert re.search(r"kcache: warm: dry run: 0 compiled, 6 already cached, 0 failed in ",
                     done.stderr)
    assert stage.cmd == ["python", "-c", "from examples import kernels; kernels.run_all()"]
    own = stage.root / "home" / "app" / ".cache" / "kcache"  # the runtime user's own root
    if target in ("runtime-layer", "runtime-onefile"):
        assert _keys(own) == set()  # nothing compiled, nothing copied: all from the layer
    else:
        assert _keys(own) == _build_keys(recipe)
        if recipe.users:
            owner = recipe.users["app"].uid
            assert all(p.stat().st_uid == owner for p in (own / "v1" / "entries").rglob("*"))


def test_bundle_is_signed_and_its_signature_checked(recipe):
    _ins, done = _log(recipe.builder.built["bundle"], "kcache export")
    assert re.search(r"kcache: exported 6 entries \(.*\) to \S+/opt/kcache\.kcb \(.*, zstd, "
                     r"signed\)", done.stderr), done.stderr
    _ins, done = _log(recipe.stages["runtime-bundle"], "kcache import")
    home = recipe.stages["runtime-bundle"].root / "home" / "app"
    assert f"kcache: imported 6 entries into {home}/.cache/kcache, signature checked" \
           in done.stderr


def test_build_log_lines_on_the_page_are_what_the_steps_print(recipe):
    shown = blocks(DOC.read_text(), LOG_MARK).strip().splitlines()
    logs = {name: "\n".join(d.stderr for _i, d in stage.log)
            for name, stage in recipe.builder.built.items()}
    for line in shown:
        text, stage_note = re.fullmatch(r"(.*?)\s{2,}\(([^()]+)\)", line).groups()
        pattern = re.escape(text)
        pattern = re.sub(r"\d+(?:\\\.\d+)?", r"\\d+(?:\\.\\d+)?", pattern)  # any figure
        pattern = re.sub(r"/(?:opt|home)(?:/[\w.]+)*", r"\\S+", pattern.replace("\\/", "/"))
        names = ["runtime-layer", "runtime-bundle"] if stage_note == "both runtimes" else [stage_note]
        for name in names:
            assert re.search(pattern, logs[name]), (line, logs[name][-2000:])


def test_another_secret_fails_the_runtime_bundle_build(recipe):
    builder, line = recipe.builder, recipe.lines["runtime-bundle"]
    builder.host_env = {"KCACHE_SECRET": "not the secret the bundle was signed with"}
    try:
        with pytest.raises(RecipeError, match="wrong signature for this secret"):
            builder.build(line, rebuild=("runtime-bundle",))
    finally:
        builder.host_env = {"KCACHE_SECRET": SECRET}


def test_the_recipe_runs_nothing_it_does_not_know():
    """The stand-ins are the only steps not carried out, and an unknown step is refused."""
    base = Path(tempfile.mkdtemp(prefix="kcache-recipe-"))
    try:
        line = parse_build_lines("docker build --target t .")[0]
        for dockerfile, why in [("FROM x AS t\nRUN pip install numpy", "not a step the test"),
                                ("FROM x AS t\nADD a /app/a", "ADD is not carried out"),
                                ("FROM x AS t\nRUN ls /usr/lib", "outside the folders"),
                                ("FROM x AS t\nCOPY --chown=1 a /app/a", "--chown is not")]:
            with pytest.raises(RecipeError, match=why):
                Build(dockerfile, base=base, context=base, users={}, host_env={},
                      stage_dir=base).build(line)
    finally:
        shutil.rmtree(base, ignore_errors=True)


# --- read-only layers on a read-only file system -------------------------------------------------

LAYER_CHILD = textwrap.dedent("""
    import json, warnings
    import kcache
    from trustkit import entry, key
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        s = kcache.Store()
        gets = [s.get(key(i)) == entry(i) for i in range(5)]
        put = s.put(key(50), entry(50))
        s.flush()
        st = s.stats()
    print(json.dumps({"gets": gets, "put": put, "hits": st.hits, "misses": st.misses,
                      "writable": s.writable, "layers": [str(p) for p in s.readonly_roots],
                      "warnings": [str(w.message) for w in rec]}))
""")


def _make_layer(folder: Path) -> Path:
    """A warmed cache of 5 entries, made root-owned 0755/0644 as the build stage leaves it."""
    folder.mkdir(mode=0o755, exist_ok=True)
    root = folder / "kcache"
    s = Store(root)
    for i in range(5):
        assert s.put(key(i), entry(i))
    s.flush()
    for path in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        os.chmod(path, (mode | (0o555 if path.is_dir() else 0o444)) & ~0o022)
    return root


def _mount_works(src: Path, dest: Path) -> bool:
    if not userkit.IS_ROOT or not shutil.which("unshare"):
        return False
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                           'mount --bind -o ro "$1" "$2" && ! touch "$2/.probe" 2>/dev/null',
                           "sh", str(src), str(dest)], capture_output=True)
    return done.returncode == 0


@pytest.mark.parametrize("how", ["read-only bind mount", "EROFS simulated"])
@pytest.mark.parametrize("overlay", ["writable KCACHE_DIR", "no writable root", "root read-only"])
def test_layer_on_a_read_only_file_system(tmp_path, how, overlay):
    """The layer on a read-only file system; new kernels go to a writable KCACHE_DIR, or, with
    none (KCACHE_DIR a folder that cannot be made there), nowhere: one warning. "root
    read-only": the cache is KCACHE_DIR itself (an imported root in a --read-only container):
    hits, and one warning per thing that cannot be written."""
    src = tmp_path / "image-src"
    _make_layer(src)
    before = snapshot(src)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env.update(HOME=str(tmp_path / "home"), PYTHONPATH=str(Path(__file__).parent))
    argv = [sys.executable, "-c", LAYER_CHILD]
    if how == "read-only bind mount":
        seen = tmp_path / "image"  # src, mounted read-only here for the child alone
        seen.mkdir()
        if not _mount_works(src, seen):
            pytest.skip("a read-only bind mount needs root and unshare -m here")
        argv = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                'mount --bind -o ro "$1" "$2" && shift 2 && exec "$@"', "sh", str(src),
                str(seen), *argv]
    else:
        seen = src  # every write under it fails with EROFS (trustkit.READONLY_SHIM)
        shim = readonly_env(tmp_path / "shim", src)
        env.update(KCACHE_TEST_READONLY=shim["KCACHE_TEST_READONLY"],
                   PYTHONPATH=os.pathsep.join([shim["PYTHONPATH"], env["PYTHONPATH"]]))
    layer = seen / "kcache"
    if overlay == "root read-only":
        env["KCACHE_DIR"] = str(layer)
    else:
        env["KCACHE_READONLY_DIRS"] = str(layer)
        env["KCACHE_DIR"] = str(tmp_path / "rw" if overlay == "writable KCACHE_DIR"
                                else seen / "home" / "kcache")
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["gets"] == [True] * 5 and got["hits"] == 5 and got["misses"] == 0
    assert got["layers"] == ([] if overlay == "root read-only" else [str(layer)])
    if overlay == "root read-only":
        assert got["put"] is False and got["writable"] is False
        # the failed put says so at once; the hits' uses (the LRU clock) are written with
        # the counters, later, and that write says so too
        assert len(got["warnings"]) == 2, got["warnings"]
        touch, = [w for w in got["warnings"] if w.startswith("kcache: cannot record use of cache entries")]
        put, = [w for w in got["warnings"] if w is not touch]
        assert "Read-only file system" in touch
        assert "Read-only file system (EROFS)" in put
    elif overlay == "writable KCACHE_DIR":
        assert got["put"] is True and got["writable"] is True and got["warnings"] == []
        assert _keys(tmp_path / "rw") == {key(50)}  # new kernels go to the overlay
    else:
        assert got["put"] is False and got["writable"] is False
        assert len(got["warnings"]) == 1, got["warnings"]
        assert "Read-only file system (EROFS)" in got["warnings"][0]
        assert "new kernels still compile, uncached" in got["warnings"][0]
    assert snapshot(src) == before  # the layer: not one byte, mode or time changed


# --- who owns the layer --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def layer_users():
    base = userkit.shared_base("kcache-layer-")
    try:
        with userkit.users("build", "run") as u:
            mounts = base / "mounts"
            mounts.mkdir(mode=0o700)
            userkit.probe(u["run"], mounts, {"PATH": os.environ.get("PATH", "")})
            yield base, u, mounts
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _as_runtime_user(base, users, mounts, layer, *argv):
    home = base / "runhome"
    home.mkdir(exist_ok=True)
    os.chown(home, users["run"].uid, users["run"].gid)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home),
           "KCACHE_DIR": str(home / "cache"), "KCACHE_READONLY_DIRS": str(layer),
           "PYTHONPATH": str(Path(__file__).parent)}
    return userkit.run_as(users["run"], argv, env=env, cwd=base, stage=mounts)


def test_layer_of_the_build_user_is_refused_with_one_warning_root_owned_is_trusted(layer_users):
    base, users, mounts = layer_users
    layer = _make_layer(base / "opt")
    # as COPY --chown=build would leave it (or a cache the build user made and copied as is)
    for path in [layer, *layer.rglob("*")]:
        os.chown(path, users["build"].uid, users["build"].gid)
    done = _as_runtime_user(base, users, mounts, layer, sys.executable, "-c", LAYER_CHILD)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["gets"] == [False] * 5 and got["hits"] == 0
    assert got["put"] is True  # the program runs on: its own root still works
    assert len(got["warnings"]) == 1, got["warnings"]
    assert got["warnings"][0].startswith(f"kcache: the read-only layer {layer} is not trusted "
                                         "and not used: ")
    assert f"is owned by another user ({users['build'].name}, uid {users['build'].uid})" \
           in got["warnings"][0]
    ls = _as_runtime_user(base, users, mounts, layer, sys.executable, "-m", "kcache", "ls")
    assert ls.stderr.count("not trusted") == 1, ls.stderr  # the command says it once too
    assert not any(key(i)[:12] in ls.stdout for i in range(5))  # only its own root's entry

    # made trusted as docs/containers.md says: chown -R root:root, chmod -R a+rX,go-w
    for path in [layer, *layer.rglob("*")]:
        os.chown(path, 0, 0)
    done = _as_runtime_user(base, users, mounts, layer, sys.executable, "-c", LAYER_CHILD)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["gets"] == [True] * 5 and got["hits"] == 5 and got["warnings"] == []
