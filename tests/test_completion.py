"""``kcache completion bash|zsh|fish``: scripts generated from the parser, checked by the shells
themselves (bash always; zsh and fish where installed, else skipped with the reason)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kcache.cli.main import COMMANDS
from kcache.cli.spec import kcache_tree


def script(shell: str) -> str:
    done = subprocess.run([sys.executable, "-m", "kcache", "completion", shell],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


@pytest.fixture(scope="module")
def scripts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("completion")
    out = {}
    for shell in ("bash", "zsh", "fish"):
        out[shell] = folder / f"kcache.{shell}"
        out[shell].write_text(script(shell))
    return out


def need(shell: str) -> str:
    path = shutil.which(shell)
    if path is None:
        pytest.skip(f"{shell} is not installed here (apt-get install {shell} to run this check)")
    return path


def bash_complete(path, *words: str) -> list[str]:
    """COMPREPLY of the generated ``_kcache`` for the command line ``kcache WORDS...`` (the
    last word is the one being completed)."""
    words_q = " ".join("'" + w.replace("'", "'\\''") + "'" for w in ("kcache", *words))
    program = (f"source '{path}'\nCOMP_WORDS=({words_q})\nCOMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))\n"
               "COMPREPLY=()\n_kcache\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n")
    done = subprocess.run([need("bash"), "--norc", "--noprofile", "-c", program],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return [w for w in done.stdout.splitlines() if w]


@pytest.mark.slow
def test_bash_script_is_valid_bash(scripts):
    done = subprocess.run([need("bash"), "-n", str(scripts["bash"])], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr


def test_bash_completes_every_command_name(scripts):
    assert bash_complete(scripts["bash"], "") == list(COMMANDS)
    assert bash_complete(scripts["bash"], "l") == ["ls"]
    assert bash_complete(scripts["bash"], "co") == ["config", "completion"]
    # the value of --dir before the command is skipped, not taken for a command
    assert bash_complete(scripts["bash"], "--dir", "/tmp", "st") == ["stats"]


def test_bash_completes_options_nested_commands_and_choices(scripts, tmp_path):
    b = scripts["bash"]
    assert bash_complete(b, "ls", "--k") == ["--kernel", "--kind"]
    assert bash_complete(b, "ls", "--kind", "") == ["kernel", "program"]
    assert "--dry-run" in bash_complete(b, "prune", "--")
    assert "--kernel" not in bash_complete(b, "stats", "--")  # per command, not a global list
    assert bash_complete(b, "config", "s") == ["show", "set"]
    assert bash_complete(b, "completion", "") == ["bash", "zsh", "fish"]
    assert bash_complete(b, "export", "--compress", "z") == ["zstd"]
    # values a command's own type checks (its own error message) complete too
    assert bash_complete(b, "ls", "--sort", "") == ["last-used", "size", "hits", "name",
                                                    "created"]
    assert bash_complete(b, "warm", "--frontend", "numba-cuda-") == ["numba-cuda-mlir"]
    (tmp_path / "sub").mkdir()
    (tmp_path / "file.sigs").write_text("")
    assert bash_complete(b, "--dir", str(tmp_path / "s")) == [str(tmp_path / "sub")]
    assert bash_complete(b, "warm", "--signatures", str(tmp_path / "f")) == [str(tmp_path / "file.sigs")]
    # a free-text value (a glob) offers nothing rather than file names
    assert bash_complete(b, "ls", "--kernel", "") == []


def test_every_parser_command_and_flag_is_in_each_script(scripts):
    texts = {shell: path.read_text() for shell, path in scripts.items()}
    for cmd in kcache_tree().walk():
        for shell, text in texts.items():
            if cmd.path:
                assert cmd.path[-1] in text, (shell, cmd.name)
            for option in cmd.options:
                for flag in option.flags:
                    assert flag.lstrip("-") in text, (shell, cmd.name, flag)


def test_zsh_script_parses_and_completes(scripts):
    zsh = need("zsh")
    done = subprocess.run([zsh, "-n", str(scripts["zsh"])], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    # Run _kcache with the completion system's builtins replaced by functions that print
    # what they were given (a real completion needs an interactive zle).
    program = (
        "compdef() { :; }\n"
        f"source '{scripts['zsh']}'\n"
        "_describe() { print -l -- \"${(@P)4}\"; }\n"
        "compadd() { shift; print -l -- \"$@\"; }\n"
        "_files() { print FILES \"$@\"; }\n"
        "_message() { :; }\n"
        "words=(kcache co); CURRENT=2; _kcache; print -r -- --\n"
        "words=(kcache ls --s); CURRENT=3; _kcache; print -r -- --\n"
        "words=(kcache completion ''); CURRENT=3; _kcache; print -r -- --\n"
        "words=(kcache --dir ''); CURRENT=3; _kcache\n")
    done = subprocess.run([zsh, "-f", "-c", program], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    commands, options, shells, folder = done.stdout.split("--\n")
    assert "config:show, get, set or unset settings" in commands.splitlines()
    assert any(line.startswith("--sort:") for line in options.splitlines())
    assert shells.split() == ["bash", "zsh", "fish"]
    assert folder.strip() == "FILES -/"


def test_fish_script_parses_and_completes(scripts):
    fish = need("fish")
    done = subprocess.run([fish, "--no-execute", str(scripts["fish"])], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    program = (f"source '{scripts['fish']}'\n"
               "complete -C 'kcache l'\necho ==\ncomplete -C 'kcache config s'\necho ==\n"
               "complete -C 'kcache ls --so'\n")
    done = subprocess.run([fish, "--no-config", "-c", program], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    first, config, option = done.stdout.split("==\n")
    assert [line.split("\t")[0] for line in first.splitlines()] == ["ls"]
    assert sorted(line.split("\t")[0] for line in config.splitlines()) == ["set", "show"]
    assert option.splitlines()[0].startswith("--sort\t")


def test_unknown_shell_is_a_usage_error():
    done = subprocess.run([sys.executable, "-m", "kcache", "completion", "tcsh"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1 and "bash" in done.stderr


@pytest.mark.parametrize("shell", ["bash", "fish"])
def test_the_install_line_of_the_help_works_in_a_new_home(shell, tmp_path):
    """The install command that `kcache completion --help` (and docs/cli.md) gives, pasted by a
    user whose completions folder does not exist yet: it used to fail ('No such file or
    directory'), the folder being made by nothing. Run by bash (the line is POSIX shell)."""
    from kcache.cli.cmd_completion import INSTALL
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env["HOME"] = str(tmp_path)
    program = f'kcache() {{ "{sys.executable}" -m kcache "$@"; }}; {INSTALL[shell]}'
    done = subprocess.run([need("bash"), "--norc", "--noprofile", "-c", program], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    written = INSTALL[shell].rsplit("> ", 1)[1].replace("~", str(tmp_path))
    assert Path(written).read_text() == script(shell)
