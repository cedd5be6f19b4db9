"""Carry out the Dockerfile of docs/containers.md without Docker (tests/test_containers.py).

:func:`recipe` reads the page's ``dockerfile`` block and its ``docker build`` lines;
:class:`Build` carries out the stages a target needs, the way ``docker build`` would, each in
a folder of its own (the stage's file system: ``/app`` of one stage is ``<base>/<stage>/app``),
every ``RUN`` in a subprocess (``/bin/sh -c``). Known instructions only (:data:`OPS`); an
unknown instruction, flag or absolute path fails, so the recipe cannot grow a step that is not
carried out. Two steps are stood in for (:data:`STAND_INS`): creating ``/opt/venv`` with the
requirements (``/opt/venv`` is the test's own environment, where kcache is installed) and
``useradd --create-home NAME`` (NAME is a user made by the test, see tests/userkit.py, or the
test's own user when it is not root).
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from userkit import IS_ROOT, User, run_as

OPS = ("FROM", "ARG", "ENV", "WORKDIR", "COPY", "RUN", "USER", "CMD")
#: first folders of the absolute paths a recipe may name; each is the stage's own
STAGE_DIRS = ("app", "opt", "home", "root", "run")
VENV = "/opt/venv"
STAND_INS = {
    "venv": re.compile(r"python -m venv /opt/venv && /opt/venv/bin/pip install "
                       r"--no-cache-dir -r (/app/requirements\.txt)"),
    "useradd": re.compile(r"useradd --create-home (\w+)"),
}
_ABS = re.compile(r"(?<![\w.$/~-])/[\w.+-]+(?:/[\w.+-]+)*/?")
_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


class RecipeError(AssertionError):
    """A step failed or is not one the test can carry out; the message says which."""


@dataclasses.dataclass
class Instr:
    op: str
    text: str
    line: int  # in the dockerfile block


def blocks(markdown: str, marker: str) -> str:
    """The body of the first fenced code block after the line holding ``marker``."""
    at = markdown.index(marker)
    start = markdown.index("```", at)
    body = markdown.index("\n", start) + 1
    return markdown[body:markdown.index("```", body)]


def parse_dockerfile(text: str) -> list[Instr]:
    """Instructions, with continuation lines joined and comments dropped."""
    out, buf, first = [], "", None
    for no, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue  # also inside a continued instruction, as Docker does
        first = first or no
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        op, _, rest = (buf + stripped).partition(" ")
        out.append(Instr(op.upper(), " ".join(rest.split()), first))
        buf, first = "", None
    if buf:
        raise RecipeError("the Dockerfile ends inside a continued instruction")
    return out


@dataclasses.dataclass
class BuildLine:
    target: str
    build_args: dict
    secrets: dict  # id -> environment variable holding it


def parse_build_lines(text: str) -> list[BuildLine]:
    """The ``docker build`` commands of a console block."""
    out = []
    for line in text.splitlines():
        words = shlex.split(line.lstrip("$ "))
        if words[:2] != ["docker", "build"]:
            continue
        target, args, secrets, i = None, {}, {}, 2
        while i < len(words):
            word = words[i]
            if word in ("--target", "--build-arg", "--secret", "-t"):
                value = words[i + 1]
                i += 2
                if word == "--target":
                    target = value
                elif word == "--build-arg":
                    name, _, val = value.partition("=")
                    args[name] = val
                elif word == "--secret":
                    opts = dict(kv.split("=", 1) for kv in value.split(","))
                    secrets[opts["id"]] = opts["env"]
            elif word == ".":
                i += 1
            else:
                raise RecipeError(f"docker build option the test does not know: {word}")
        out.append(BuildLine(target, args, secrets))
    return out


@dataclasses.dataclass
class Stage:
    name: str
    root: Path
    env: dict
    workdir: str = "/"
    user: str | None = None  # None: root
    args: dict = dataclasses.field(default_factory=dict)
    log: list = dataclasses.field(default_factory=list)  # (instruction, CompletedProcess)
    cmd: list | None = None


class Build:
    """One recipe built in ``base``: ``build(target, ...)`` carries out the stages it needs.
    ``context``: the build context folder; ``users``: {name in the recipe: User} (empty when
    the test is not root: those steps run as the test's user); ``host_env``: where the
    ``--secret ...,env=VAR`` values are read; ``stage_dir``: root-only folder for mounts."""

    def __init__(self, dockerfile: str, *, base: Path, context: Path, users: dict,
                 host_env: dict, stage_dir: Path):
        self.instrs = parse_dockerfile(dockerfile)
        self.base, self.context, self.users = base, context, users
        self.host_env, self.stage_dir = host_env, stage_dir
        self.global_args = {}
        self.stages: dict[str, list[Instr]] = {}
        self.order: list[str] = []
        current = None
        for ins in self.instrs:
            if ins.op not in OPS:
                raise RecipeError(f"line {ins.line}: {ins.op} is not carried out by the test")
            if ins.op == "FROM":
                current = ins.text.split()[-1]
                self.stages[current] = [ins]
                self.order.append(current)
            elif current is None:
                if ins.op != "ARG":
                    raise RecipeError(f"line {ins.line}: {ins.op} before the first FROM")
                name, _, value = ins.text.partition("=")
                self.global_args[name] = value
            else:
                self.stages[current].append(ins)
        self.built: dict[str, Stage] = {}
        (base / "stages").mkdir(mode=0o755, exist_ok=True)

    # -- public ----------------------------------------------------------------------------
    def build(self, line: BuildLine, rebuild: tuple = ()) -> Stage:
        """Carry out ``line.target`` and what it needs (stages already built are reused, as
        BuildKit's cache would: secrets are not part of its cache keys). ``rebuild``: stage
        names to carry out again."""
        for name in rebuild:
            self.built.pop(name, None)
        self._line = line
        return self._stage(line.target)

    # -- stages ------------------------------------------------------------------------------
    def _stage(self, name: str) -> Stage:
        if name not in self.built:
            if name not in self.stages:
                raise RecipeError(f"no stage {name!r}")
            self.built[name] = self._run_stage(name)
        return self.built[name]

    def _run_stage(self, name: str) -> Stage:
        instrs = self.stages[name]
        image = self._subst(instrs[0].text.split()[0], self._global_values())
        root = self.base / "stages" / f"{name}-{len(os.listdir(self.base / 'stages'))}"
        if image in self.stages:  # FROM an earlier stage: its files, variables, user
            parent = self._stage(image)
            shutil.copytree(parent.root, root, symlinks=True)
            st = Stage(name, root, dict(parent.env), parent.workdir, parent.user)
        else:
            root.mkdir(parents=True)
            os.chmod(root, 0o755)
            st = Stage(name, root, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        for ins in instrs[1:]:
            getattr(self, f"_{ins.op.lower()}")(st, ins)
        return st

    def _global_values(self) -> dict:
        return {**self.global_args, **{k: v for k, v in self._line.build_args.items()
                                       if k in self.global_args}}

    # -- paths and variables -------------------------------------------------------------------
    def _path(self, st: Stage, path: str) -> Path:
        """A recipe path in stage ``st``."""
        if not path.startswith("/"):
            return self._path(st, os.path.join(st.workdir, path))
        if path == VENV or path.startswith(VENV + "/"):
            return Path(sys.prefix, path[len(VENV) + 1:])
        first = path.strip("/").split("/")[0]
        if first not in STAGE_DIRS:
            raise RecipeError(f"absolute path {path} is outside the folders the test maps "
                              f"({', '.join('/' + d for d in STAGE_DIRS)})")
        return st.root / path.lstrip("/")

    def _map_text(self, st: Stage, text: str) -> str:
        return _ABS.sub(lambda m: str(self._path(st, m.group(0))), text)

    @staticmethod
    def _subst(text: str, values: dict) -> str:
        return _VAR.sub(lambda m: values.get(m.group(1) or m.group(2), ""), text)

    # -- instructions --------------------------------------------------------------------------
    def _arg(self, st: Stage, ins: Instr) -> None:
        name, eq, default = ins.text.partition("=")
        if name in self._line.build_args:
            st.args[name] = self._line.build_args[name]
        elif eq:
            st.args[name] = default
        elif name in self.global_args:
            st.args[name] = self._global_values()[name]

    def _env(self, st: Stage, ins: Instr) -> None:
        for word in shlex.split(ins.text):
            name, eq, value = word.partition("=")
            if not eq:
                raise RecipeError(f"line {ins.line}: ENV {word}: the test reads NAME=VALUE only")
            st.env[name] = self._subst(self._map_text(st, value), {**st.args, **st.env})

    def _workdir(self, st: Stage, ins: Instr) -> None:
        st.workdir = ins.text
        self._make_dirs(self._path(st, ins.text))

    def _user(self, st: Stage, ins: Instr) -> None:
        st.user = None if ins.text == "root" else ins.text

    def _cmd(self, st: Stage, ins: Instr) -> None:
        st.cmd = json.loads(ins.text)  # exec form only

    def _copy(self, st: Stage, ins: Instr) -> None:
        words = ins.text.split()
        source_stage = None
        while words[0].startswith("--"):
            flag, _, value = words.pop(0).partition("=")
            if flag != "--from":
                raise RecipeError(f"line {ins.line}: COPY {flag} is not carried out by the test")
            source_stage = self._stage(value)
        *sources, dest = words
        for src in sources:
            if source_stage is None:
                path = (self.context / src).resolve()
                if self.context.resolve() not in (path, *path.parents):
                    raise RecipeError(f"line {ins.line}: {src} is outside the build context")
            else:
                path = self._path(source_stage, src)
            target = self._path(st, dest)
            if path == target:
                continue  # /opt/venv: the test's environment in every stage
            self._copy_one(path, target, into=dest.endswith("/"))

    def _copy_one(self, src: Path, dest: Path, into: bool) -> None:
        """Docker's COPY: a folder's contents into ``dest``; modes kept, owned by root (the
        test's user when not root), new modification times."""
        if src.is_dir():
            self._make_dirs(dest)
            shutil.copytree(src, dest, copy_function=shutil.copy, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            self._make_dirs(dest.parent if not into else dest)
            shutil.copy(src, dest / src.name if into else dest)
        if IS_ROOT:
            for path in [dest, *(dest.rglob("*") if dest.is_dir() else [])]:
                os.chown(path, 0, 0, follow_symlinks=False)

    @staticmethod
    def _make_dirs(path: Path) -> None:
        missing = [p for p in [path, *path.parents] if not p.exists()]
        path.mkdir(parents=True, exist_ok=True)
        for p in missing:
            os.chmod(p, 0o755)

    def _run(self, st: Stage, ins: Instr) -> None:
        words = ins.text.split(" ")
        secret_env = {}
        while words[0].startswith("--"):
            flag, _, value = words.pop(0).partition("=")
            if flag != "--mount":
                raise RecipeError(f"line {ins.line}: RUN {flag} is not carried out by the test")
            secret_env.update(self._secret(value, ins))
        command = " ".join(words)
        if self._stand_in(st, command):
            return
        if re.search(r"\b(pip|useradd|apt-get|apt)\b", command):
            raise RecipeError(f"line {ins.line}: {command!r}: not a step the test stands in for")
        env = {**st.env, **st.args, **secret_env, "HOME": str(self._home(st))}
        argv = ["/bin/sh", "-c", self._map_text(st, command)]
        cwd = self._path(st, st.workdir)
        user = self.users.get(st.user) if st.user else None
        if user is not None:
            done = run_as(user, argv, env=env, cwd=cwd, stage=self.stage_dir)
        else:
            done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True,
                                  timeout=600, stdin=subprocess.DEVNULL)
        st.log.append((ins, done))
        if done.returncode != 0:
            raise RecipeError(f"stage {st.name}, line {ins.line}: RUN {command}\nexit "
                              f"{done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")

    def _secret(self, spec: str, ins: Instr) -> dict:
        opts = dict(kv.split("=", 1) for kv in spec.split(","))
        if opts.pop("type", None) != "secret" or "env" not in opts:
            raise RecipeError(f"line {ins.line}: --mount={spec}: the test carries out "
                              "type=secret,...,env=VAR mounts only")
        var = self._line.secrets.get(opts["id"])
        if var is None or var not in self.host_env:
            if opts.get("required") == "true":
                raise RecipeError(f"line {ins.line}: secret {opts['id']} is required and was "
                                  "not given (--secret on the docker build line)")
            return {}
        return {opts["env"]: self.host_env[var]}

    def _home(self, st: Stage) -> Path:
        if st.user:
            return self._path(st, f"/home/{st.user}")  # made by the useradd stand-in
        home = self._path(st, "/root")
        self._make_dirs(home)
        return home

    def _stand_in(self, st: Stage, command: str) -> bool:
        if (m := STAND_INS["venv"].fullmatch(command)) is not None:
            if not self._path(st, m.group(1)).is_file():
                raise RecipeError(f"{m.group(1)} was not copied before the install")
            return True  # /opt/venv is sys.prefix, kcache installed there
        if (m := STAND_INS["useradd"].fullmatch(command)) is not None:
            home = self._path(st, f"/home/{m.group(1)}")
            self._make_dirs(home)
            user: User | None = self.users.get(m.group(1))
            if user is not None:
                os.chown(home, user.uid, user.gid)
                os.chmod(home, 0o750)
            return True
        return False
