"""The documentation cannot rot: runnable code blocks are executed, the CLI reference matches
the parser, every ``KCACHE_*`` variable the code reads is documented, and links between pages
resolve.

Runnable blocks (README.md and docs/*.md): a code block is run when the line right before its
opening fence is an HTML comment (invisible on GitHub) of this form:

    <!-- runnable -->                  run it (python: a script; bash/sh/console: bash -euo pipefail)
    <!-- runnable: gpu -->             run it only under the gpu marker (needs a CUDA GPU)
    <!-- runnable: file=kernels.py --> write the block to that file instead (later blocks use it)
    <!-- runnable: exit=1 -->          the block must exit with that status (default 0)
    <!-- runnable: output -->          a console block whose output, shown under each ``$``
                                       line, must be what that command prints on stdout
                                       (normalised: :func:`normalise`; a ``...`` line stands
                                       for any lines)
    <!-- runnable: output, terminal --> the same, with stdout on an 80-column terminal (as
                                       tables are shown to people); stderr follows stdout,
                                       without the progress lines a terminal shows as a bar

Options combine with commas (``<!-- runnable: gpu, exit=1 -->``). In ``console`` blocks only
the lines starting with ``$ `` are run (the rest is the output shown to the reader). The blocks
of one page run in order, each in a fresh process, sharing one fresh temporary folder: the
working directory (``file=`` blocks land there, and numba-cuda's own cache in its
``__pycache__``). No ``KCACHE_*`` variable is set: a reader pastes a block into their own
shell, so each block names a throwaway cache root itself (``export KCACHE_DIR=$PWD/demo-cache``,
``Store(tempfile.mkdtemp())``), and ``HOME`` and ``XDG_*`` point at an empty folder of their
own: a block that writes anything there (the default cache root, a ``config.json``) fails,
as it would have written in the reader's cache or settings. ``$REPO`` is the repository
root; the venv's ``python`` and ``kcache`` come first on ``PATH``. The working directory looks
like the reader's clone: ``.venv`` is the running interpreter's environment (so
``.venv/bin/python`` and ``.venv/bin/kcache`` work as written) and ``examples`` is the
repository's.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import forkserver
import ptykit

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PAGES = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
MARKER = re.compile(r"^<!--\s*runnable(?::\s*(?P<opts>[^>]*?))?\s*-->\s*$")
FENCE = re.compile(r"^(?P<fence>```+)\s*(?P<lang>[\w+-]*)")
RUN_LANGS = {"python": "python", "py": "python", "bash": "bash", "sh": "bash",
             "shell": "bash", "console": "console"}
#: Pages other branches add (docs/containers.md: the containers work); links to them are
#: checked once they exist. Remove a name here when its page lands.
PENDING_PAGES = {"containers.md"}
#: Pages that quote hostile text on purpose (rich markup, fake links): not link-checked.
QUOTING_PAGES = {"hostile-files.md"}
#: Seconds one block may take (a numba compile on the loaded 2-core CI box takes up to ~20 s)
BLOCK_TIMEOUT = 300


@dataclasses.dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    gpu: bool = False
    file: str | None = None
    exit: int = 0
    output: bool = False
    terminal: bool = False

    def __str__(self):
        return f"{os.path.relpath(self.page, REPO)}:{self.line}"


def parse_options(text: str | None, where: str) -> dict:
    opts: dict = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        if part == "gpu":
            opts["gpu"] = True
        elif part.startswith("file="):
            opts["file"] = part[len("file="):].strip()
        elif part.startswith("exit="):
            opts["exit"] = int(part[len("exit="):])
        elif part in ("output", "terminal"):
            opts[part] = True
        else:
            raise ValueError(f"{where}: unknown runnable option {part!r} (accepted: gpu, "
                             "file=NAME, exit=N, output, terminal)")
    return opts


def blocks(page: Path) -> list[Block]:
    """The runnable blocks of ``page``. Raises ValueError for a marker not followed by a
    fence, or a block whose language cannot be run."""
    lines = page.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        marker = MARKER.match(lines[i])
        if not marker:
            i += 1
            continue
        where = f"{os.path.relpath(page, REPO)}:{i + 1}"
        fence = FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if fence is None:
            raise ValueError(f"{where}: a runnable marker must be followed by a code fence")
        opts = parse_options(marker.group("opts"), where)
        lang = fence.group("lang")
        if "file" not in opts and lang not in RUN_LANGS:
            raise ValueError(f"{where}: cannot run a {lang or 'plain'} block (accepted: "
                             f"{', '.join(sorted(RUN_LANGS))}, or file=NAME)")
        end = i + 2
        while end < len(lines) and not lines[end].startswith(fence.group("fence")):
            end += 1
        out.append(Block(page, i + 2, lang, "\n".join(lines[i + 2:end]) + "\n", **opts))
        i = end + 1
    return out


def script_of(block: Block) -> tuple[list[str], str, str]:
    """(command, script suffix, script text) that run ``block``."""
    kind = RUN_LANGS[block.lang]
    if kind == "python":
        return [sys.executable], ".py", block.code
    code = block.code
    if kind == "console":
        code = "\n".join(l[2:] for l in code.splitlines() if l.startswith("$ ")) + "\n"
    return ["bash", "-euo", "pipefail"], ".sh", code


#: The reader's home inside the work folder (:func:`block_env`): nothing may be written there.
READER_HOME = ".reader-home"
#: Where the XDG base directories point, inside the reader's home (never created by the test).
XDG_DIRS = {"XDG_CACHE_HOME": ".cache", "XDG_CONFIG_HOME": ".config",
            "XDG_DATA_HOME": ".local/share", "XDG_STATE_HOME": ".local/state"}


def block_env(work: Path, bin_dir: Path | None = None) -> dict:
    """The blocks' environment; ``bin_dir`` (default: this interpreter's) first on PATH. No
    ``KCACHE_*`` variable; ``HOME`` and ``XDG_*`` in an empty folder of the work folder
    (:func:`home_writes` says what a block wrote there)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KCACHE_", "XDG_")) and k != "NUMBA_CACHE_DIR"}
    # (NUMBA_CACHE_DIR: numba-cuda's own cache is __pycache__ in the work folder)
    bin_dir = bin_dir or Path(sys.executable).parent
    home = work / READER_HOME
    home.mkdir(exist_ok=True)
    env.update({name: str(home / sub) for name, sub in XDG_DIRS.items()})
    env.update(HOME=str(home), REPO=str(REPO),
               PATH=os.pathsep.join([str(bin_dir), env.get("PATH", "")]),
               PYTHONDONTWRITEBYTECODE="1",
               # the CUDA driver's own JIT cache (~/.nv) on a GPU machine: not the reader's
               # kcache or settings, and not what is checked here
               CUDA_CACHE_PATH=str(work / ".nv-cache"))
    # PYTHONPATH is kept: it is part of the reader's environment (on the GPU machine it holds
    # the numpy that numba-cuda needs)
    return env


def home_writes(work: Path) -> list[str]:
    """What blocks wrote in the reader's home (:data:`READER_HOME`): paths relative to it."""
    home = work / READER_HOME
    return sorted(str(p.relative_to(home)) for p in home.rglob("*"))


def check_home(block: Block, work: Path) -> None:
    """Fail ``block`` when it wrote in the reader's home: it would have touched the reader's
    own cache or settings (the default root ``~/.cache/kcache``, its ``config.json``)."""
    wrote = home_writes(work)
    assert not wrote, (f"{block} wrote in the reader's home (HOME, XDG_*): {wrote[:8]}; a "
                       "runnable block must use a throwaway cache root it names itself "
                       "(export KCACHE_DIR=$PWD/demo-cache, Store(tempfile.mkdtemp()))")


#: What varies from run to run in a command's output, and what stands for it when a page's
#: shown output is compared (``output`` blocks): paths, keys, sizes, seconds, alignment.
NORMALISE = [
    (re.compile(r"(?<![\w.])(?:/[\w.+-]+)+/?"), "PATH"),
    (re.compile(r"\b[0-9a-f]{12}\b"), "KEY"),
    (re.compile(r"\b\d+(?:\.\d+)? (?:B|KiB|MiB|GiB|bytes)\b"), "SIZE"),
    (re.compile(r"\b\d+(?:\.\d+)? s\b"), "SECONDS"),
    (re.compile(r"\b\d+ jobs?\b"), "JOBS"),
    (re.compile(r"[ \t]+"), " "),
]


#: On a terminal, how much of a name or signature a table shows depends on the widths of
#: the other cells (a compile of 10 s takes a column one cell wider): a kernel name stands
#: as its qualname, a word cut in its middle as "…".
NORMALISE_TERMINAL = [
    (re.compile(r"\S*:(\w+)"), r"\1"),
    (re.compile(r"\S*…\S*"), "…"),
]


def normalise(text: str, terminal: bool = False) -> list[str]:
    """``text``'s lines with :data:`NORMALISE` (and for a terminal's text
    :data:`NORMALISE_TERMINAL`) applied, stripped, blank lines dropped."""
    out = []
    for text_line in text.splitlines():
        for pattern, stand_in in NORMALISE + (NORMALISE_TERMINAL if terminal else []):
            text_line = pattern.sub(stand_in, text_line)
        if text_line.strip():
            out.append(text_line.strip())
    return out


def console_steps(code: str) -> list[tuple[str, str]]:
    """``(command, output shown under it)`` for each ``$`` line of a console block."""
    steps: list[tuple[str, list[str]]] = []
    for text_line in code.splitlines():
        if text_line.startswith("$ "):
            steps.append((text_line[2:], []))
        elif steps:
            steps[-1][1].append(text_line)
    return [(command, "\n".join(shown)) for command, shown in steps]


def output_matches(shown: str, printed: str, terminal: bool = False) -> bool:
    """True when ``printed`` is ``shown`` once both are normalised (:func:`normalise`); a
    ``...`` line of ``shown`` stands for any lines."""
    pattern = "".join(r"(?:[^\n]*\n)*?" if text_line == "..." else re.escape(text_line) + r"\n"
                      for text_line in normalise(shown, terminal))
    lines = normalise(printed, terminal)
    return re.fullmatch(pattern, "".join(f"{text_line}\n" for text_line in lines)) is not None


#: Columns of the terminal of ``terminal`` blocks.
TERMINAL_COLUMNS = 80
#: Lines a piped stderr gets instead of a progress bar (``kcache: warm: [3/12] ...``).
PROGRESS_LINE = re.compile(r"^kcache: warm: \[\d+/\d+\] ")


def on_terminal(argv: list[str], cwd: Path, env: dict) -> tuple[int, str, str]:
    """Run ``argv`` with stdout on a pseudo-terminal of :data:`TERMINAL_COLUMNS` columns;
    (status, what the terminal showed without styles, stderr)."""
    master, slave = ptykit.open_terminal(TERMINAL_COLUMNS)
    proc = subprocess.Popen(argv, cwd=cwd, stdout=slave, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL,
                            env=dict(env, COLUMNS=str(TERMINAL_COLUMNS), TERM="xterm"))
    os.close(slave)
    shown = ptykit.drain(master)
    err = proc.stderr.read().decode()
    proc.stderr.close()
    status = proc.wait(timeout=BLOCK_TIMEOUT)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown.decode()).replace("\r\n", "\n")
    return status, text, err


def run_output_block(block: Block, work: Path, env: dict) -> None:
    """Run each ``$`` line of ``block`` and compare its stdout with the output shown."""
    for n, (command, shown) in enumerate(console_steps(block.code)):
        script = work / f".block{block.line}-{n}.sh"
        script.write_text(command + "\n")
        argv = ["bash", "-euo", "pipefail", str(script)]
        if block.terminal:
            status, out, err = on_terminal(argv, work, env)
            out += "".join(f"{text_line}\n" for text_line in err.splitlines()
                           if not PROGRESS_LINE.match(text_line))
        else:
            done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True,
                                  timeout=BLOCK_TIMEOUT)
            status, out, err = done.returncode, done.stdout, done.stderr
        assert status == block.exit, f"{block}: '{command}' exited {status}\n{err[-3000:]}"
        assert output_matches(shown, out, block.terminal), (
            f"{block}: '{command}' printed what the page does not show (normalised)\n--- shown\n"
            + "\n".join(normalise(shown, block.terminal)) + "\n--- printed\n"
            + "\n".join(normalise(out, block.terminal)))


#: The programs a block runs by name that are this environment's Python: with the suite's
#: fork server on, ``.venv/bin`` has stand-ins for them (tests/forkserver.py's
#: ``write_stand_ins``) that run the real program forked from the server (with numba.cuda
#: imported: ~1.5 s of CPU less for each of the ~40 ``python`` and ``kcache`` commands of
#: the pages), or as itself where a fresh interpreter is needed (a terminal, ``python -``).
STAND_INS = ("python", "python3", "kcache")


def like_a_clone(work: Path) -> Path:
    """Give ``work`` the reader's ``.venv`` (this interpreter's environment) and ``examples``;
    return its ``bin`` folder, which goes first on PATH."""
    venv = work / ".venv"
    real_bin = Path(sys.executable).parent
    forking = forkserver.FORK and forkserver.enabled
    if sys.prefix != sys.base_prefix and not forking:
        venv.symlink_to(Path(sys.prefix), target_is_directory=True)
    elif sys.prefix != sys.base_prefix:  # the environment's own files, but bin/'s Pythons
        venv.mkdir()
        for entry in Path(sys.prefix).iterdir():
            if entry.name != "bin":
                (venv / entry.name).symlink_to(entry)
        (venv / "bin").mkdir()
        for entry in real_bin.iterdir():
            if entry.name not in STAND_INS:
                (venv / "bin" / entry.name).symlink_to(entry)
    else:  # no virtual environment: its bin/ holds this interpreter and its kcache script
        (venv / "bin").mkdir(parents=True)
        (venv / "bin" / "python").symlink_to(sys.executable)
        kcache = real_bin / "kcache"
        if kcache.exists():
            (venv / "bin" / "kcache").symlink_to(kcache)
    if forking and sys.prefix != sys.base_prefix:
        forkserver.start()
        forkserver.write_stand_ins(venv / "bin", {name: str(real_bin / name) for name in STAND_INS
                                                  if (real_bin / name).exists()})
    (work / "examples").symlink_to(REPO / "examples", target_is_directory=True)
    return venv / "bin" if sys.prefix != sys.base_prefix else real_bin


def run_page(page: Path, work: Path, gpu: bool) -> int:
    """Run the page's blocks in order (gpu ones only when ``gpu``); return how many ran."""
    env = block_env(work, like_a_clone(work))
    ran = 0
    for block in blocks(page):
        if block.gpu and not gpu:
            continue
        if block.file:
            target = work / block.file
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.code)
            continue
        if block.output:
            # the output a page shows for a machine without a GPU is checked as such on a GPU
            # machine too: numba-cuda is shown no device
            shown_for = env if block.gpu or not gpu else {**env, "CUDA_VISIBLE_DEVICES": ""}
            run_output_block(block, work, shown_for)
            check_home(block, work)
            ran += 1
            continue
        command, suffix, code = script_of(block)
        script = work / f".block{block.line}{suffix}"
        script.write_text(code)
        done = subprocess.run([*command, str(script)], cwd=work, env=env, capture_output=True,
                              text=True, timeout=BLOCK_TIMEOUT)
        assert done.returncode == block.exit, (
            f"{block} exited {done.returncode} (expected {block.exit})\n--- block\n{block.code}"
            f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}")
        check_home(block, work)
        ran += 1
    return ran


def pages_with(gpu: bool) -> list[Path]:
    return [p for p in PAGES if any(b.gpu == gpu and not b.file for b in blocks(p))]


# --- runnable blocks --------------------------------------------------------------------

#: Pages a new reader pastes block by block: every block in a language that runs is run
#: (so that it is checked not to write in the reader's cache or settings) or says why not.
PASTED_PAGES = ("quickstart.md",)
NOT_RUN = re.compile(r"^<!--\s*not run:\s*\S.*-->\s*$")


def test_every_block_of_a_pasted_page_is_run_or_says_why_not():
    """issue 35: quickstart's `.venv/bin/python examples/main.py` (no marker, so never run
    here) filled the reader's ~/.cache/kcache; the next block, run here in a fresh home,
    passed only because that root did not exist yet (the toolchain memo is written only into
    an existing root), while a reader's got a toolchain.msgpack."""
    for name in PASTED_PAGES:
        lines = (DOCS / name).read_text(encoding="utf-8").splitlines()
        inside = False
        for i, line in enumerate(lines):
            fence = FENCE.match(line)
            if not fence:
                continue
            if not inside and fence.group("lang") in RUN_LANGS:
                before = lines[i - 1] if i else ""
                assert MARKER.match(before) or NOT_RUN.match(before), (
                    f"docs/{name}:{i + 1}: a {fence.group('lang')} block neither runnable "
                    "nor marked <!-- not run: REASON -->")
            inside = not inside


def test_markers_are_well_formed():
    """Every marker is followed by a block that can be run (parsing raises otherwise), and
    there is something to run: the quick start, guide and migration pages have CPU blocks."""
    found = {p.name: blocks(p) for p in PAGES}
    for name in ("quickstart.md", "guide.md", "migrating.md", "faq.md"):
        assert any(not b.gpu and not b.file for b in found[name]), name


@pytest.mark.slow
@pytest.mark.parametrize("page", pages_with(gpu=False), ids=lambda p: p.name)
def test_runnable_blocks(page, tmp_path):
    assert run_page(page, tmp_path, gpu=False) > 0


@pytest.mark.gpu
@pytest.mark.parametrize("page", pages_with(gpu=True), ids=lambda p: p.name)
def test_runnable_gpu_blocks(page, tmp_path):
    from numba import cuda
    if not cuda.is_available():
        pytest.skip("no CUDA GPU here")
    assert run_page(page, tmp_path, gpu=True) > 0


def test_a_failing_block_fails_the_test(tmp_path):
    """The runner itself: a block that exits 1 where 0 is expected is reported with its page
    and line; a file= block is written, not run; console blocks run only the $ lines."""
    page = tmp_path / "page.md"
    page.write_text("<!-- runnable: file=mod.py -->\n```python\nX = 41\n```\n\n"
                    "<!-- runnable -->\n```console\n$ python -c 'import mod; assert mod.X == 41'\n"
                    "this line is output, not run\n```\n\n"
                    "<!-- runnable: exit=3 -->\n```python\nraise SystemExit(3)\n```\n\n"
                    "<!-- runnable -->\n```bash\nfalse\n```\n")
    work = tmp_path / "work"
    work.mkdir()
    global REPO
    saved, REPO = REPO, tmp_path  # so the block names print relative to the temp folder
    try:
        with pytest.raises(AssertionError, match=r"page.md:18 exited 1 \(expected 0\)"):
            run_page(page, work, gpu=False)
    finally:
        REPO = saved
    assert (work / "mod.py").read_text() == "X = 41\n"


@pytest.mark.parametrize("code", [
    "from kcache import Entry, Store, make_key\n"
    "Store().put(make_key({'x': 1}), Entry({'cubin': b'x' * 64}, {}))\n",
    "import subprocess\nsubprocess.run(['kcache', 'config', 'set', 'lock_timeout', '5m'], "
    "check=True)\n",
])
def test_a_block_that_writes_in_the_reader_s_home_fails(tmp_path, code):
    """A block on the default root (as guide.md's size-cap block once was) or writing the
    default root's config.json fails, naming what it wrote; the same block with its own
    throwaway root passes."""
    page = tmp_path / "page.md"
    page.write_text(f"<!-- runnable -->\n```python\n{code}```\n")
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(AssertionError, match=r"page.md:2 wrote in the reader's home \(HOME, "
                                             r"XDG_\*\): \['\.cache'"):
        run_page_named(page, work)
    safe = tmp_path / "safe.md"
    safe.write_text("<!-- runnable -->\n```python\nimport os, tempfile\n"
                    f"os.environ['KCACHE_DIR'] = tempfile.mkdtemp()\n{code}```\n")
    other = tmp_path / "other"
    other.mkdir()
    assert run_page(safe, other, gpu=False) == 1


def run_page_named(page: Path, work: Path) -> int:
    """:func:`run_page` with block names relative to the page's folder."""
    global REPO
    saved, REPO = REPO, page.parent
    try:
        return run_page(page, work, gpu=False)
    finally:
        REPO = saved


def test_output_blocks_compare_what_is_printed(tmp_path):
    """An ``output`` block passes when the command prints what is shown (paths, keys, sizes,
    seconds and alignment aside; ``...`` for any lines) and fails when it prints otherwise."""
    assert output_matches("Cache: /home/you/c (x)\n  k  1.5 KiB  key dc03b768fc79\n...\nend",
                          "Cache: /tmp/w/cache (x)\n  k     22 B  key 0123456789ab\nA\nB\nend\n")
    assert not output_matches("compiled in 0.5 s", "already cached\n")
    assert not output_matches("a\nb", "a\n")
    # on a terminal a cut name or signature may be cut elsewhere; the qualname must be the same
    assert output_matches("…kernels:axpy  (array(f…32))  sm_80",
                          "examples.kernels:axpy  (array(floa…2))  sm_80\n", terminal=True)
    assert not output_matches("…kernels:axpy  sm_80", "…kernels:saxpy  sm_80\n", terminal=True)
    page = tmp_path / "page.md"
    page.write_text("<!-- runnable: output -->\n```console\n$ echo one 12 KiB\none 3 B\n"
                    "$ echo two\nthree\n```\n")
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(AssertionError, match=r"'echo two' printed what the page does not show"):
        run_page(page, work, gpu=False)


# --- the CLI reference and the environment variables ------------------------------------

def test_cli_reference_matches_the_parser():
    from kcache.cli.reference import render
    committed = (DOCS / "cli-reference.md").read_text(encoding="utf-8")
    assert committed == render(), (
        "docs/cli-reference.md differs from the parser: run "
        "'python -m kcache.cli.reference > docs/cli-reference.md'")


def test_every_json_command_has_a_schema():
    from kcache.cli.reference import headings, json_schema_link
    from kcache.cli.spec import kcache_tree
    found = headings()
    missing = [cmd.name for cmd in kcache_tree().commands
               if cmd.path[0] != "completion" and any(o.flags[0] == "--json" for o in cmd.options)
               and json_schema_link(cmd, found) is None]
    assert missing == [], f"no '### `kcache CMD --json`' heading in docs/ for {missing}"


def test_every_kcache_variable_in_the_code_is_documented():
    from kcache.cli.env import TEST_ONLY_PREFIX, VARIABLES, names
    used = set()
    for folder in ("kcache", "dispatcher", "cli"):
        for path in (REPO / folder).rglob("*.py"):
            used |= set(re.findall(r"\bKCACHE_[A-Z][A-Z_]*[A-Z]\b", path.read_text(encoding="utf-8")))
    used = {n for n in used if not n.startswith(TEST_ONLY_PREFIX) and n != "KCACHE_X"}
    assert used - set(names()) == set(), "add these to kcache/cli/env.py VARIABLES"
    guide = (DOCS / "guide.md").read_text(encoding="utf-8")
    assert [v.name for v in VARIABLES if f"`{v.name}`" not in guide] == []
    done = subprocess.run([sys.executable, "-m", "kcache", "--help"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0
    assert [n for n in names() if n not in done.stdout] == []


def test_kcache_enable_is_described_for_both_front_ends():
    """``kcache --help`` said KCACHE_ENABLE serves ``numba.cuda.jit(cache=True)`` kernels
    alone; it serves numba-cuda-mlir's too (docs/mlir.md; a user trial)."""
    from kcache.cli.env import VARIABLES
    [enable] = [v for v in VARIABLES if v.name == "KCACHE_ENABLE"]
    assert "numba.cuda.jit(cache=True)" in enable.meaning
    assert "numba_cuda_mlir.cuda.jit(cache=True)" in enable.meaning


# --- links ------------------------------------------------------------------------------

LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")


@functools.lru_cache(maxsize=None)
def anchors(page: Path) -> set[str]:
    from kcache.cli.reference import anchor, headings
    seen: dict[str, int] = {}
    out = set()
    for name, text in headings(page.parent):
        if name != page.name:
            continue
        base = anchor(text)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_no_page_has_two_sections_of_one_title():
    """Two headings with the same text on one page read as one section twice in a table of
    contents, and a link to the title reaches the first only (compat.md once had two "numba-cuda's
    own test suite under kcache")."""
    from kcache.cli.reference import headings
    for folder in (DOCS, REPO):
        seen: dict = {}
        for page, text in headings(folder):
            seen.setdefault(page, []).append(text)
        twice = {page: sorted({t for t in texts if texts.count(t) > 1})
                 for page, texts in seen.items()}
        assert {page: t for page, t in twice.items() if t} == {}


def test_links_between_pages_resolve():
    bad = []
    for page in PAGES:
        if page.name in QUOTING_PAGES:
            continue
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        text = re.sub(r"``.*?``|`[^`\n]*`", "", text)  # code spans hold no links
        for match in LINK.finditer(text):
            target = match.group("target")
            if re.match(r"[a-z]+:", target) or target.startswith("mailto:"):
                continue
            path, _, frag = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if dest.name in PENDING_PAGES and not dest.exists():
                continue
            if not dest.exists():
                bad.append(f"{page.name}: {target} (no such file)")
            elif frag and dest.suffix == ".md" and frag not in anchors(dest):
                bad.append(f"{page.name}: {target} (no such heading)")
    assert bad == []
