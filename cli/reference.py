"""Generate docs/cli-reference.md from the ``kcache`` argument parser.

    python -m kcache.cli.reference > docs/cli-reference.md

Every command and nested command, its usage, every option and positional with its help text,
choices and default, the exit statuses, the ``KCACHE_*`` variables (:mod:`kcache.cli.env`),
and a link to the JSON schema of each command that prints JSON (found by heading in docs/:
a heading naming ``kcache CMD`` and ``--json``). tests/test_docs.py fails when the committed
file differs from this output, so the reference cannot drift from the parser.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from kcache.cli.env import VARIABLES
from kcache.cli.spec import Command, Option, Positional, kcache_tree

DOCS = Path(__file__).resolve().parents[1] / "docs"

#: What exit status 1 means for a command, where it says more than the general rule.
EXIT_ONE = {
    "show": "no entry has the prefix; the entry is corrupt; --sass without a disassembler",
    "prune": "an entry had to be left in place (named with the reason); the root cannot be written",
    "rm": "no entry has a prefix; the selection matches no entry; an entry had to be left in place",
    "clear": "an entry had to be left in place; the answer at the prompt was not yes",
    "verify": "bad entries remain (after --fix: those that could not be moved)",
    "config": "a setting is bad (it is still shown, with its error)",
    "warm": "a kernel failed to compile or could not be stored (the rest went on)",
    "export": "no entry matches (nothing written)",
    "import": "the bundle cannot be used, or an entry in it was refused",
    "clean-numba-cache": "a file could not be removed or a folder could not be read (each "
                         "named; the rest went on)",
}


def anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation but ``-`` and ``_``
    dropped, spaces to ``-``."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def headings(docs: Path = DOCS) -> list[tuple[str, str]]:
    """(page name, heading text) of every Markdown heading in ``docs``, page by page."""
    out = []
    for page in sorted(docs.glob("*.md")):
        fence = False
        for line in page.read_text(encoding="utf-8").splitlines():
            if line.startswith("```"):
                fence = not fence
            elif not fence and line.startswith("#"):
                out.append((page.name, line.lstrip("#").strip()))
    return out


def json_schema_link(cmd: Command, found: list[tuple[str, str]]) -> str | None:
    """``page#anchor`` of the heading documenting ``cmd``'s JSON output, or None."""
    words = cmd.name.split()
    for page, text in found:
        plain = text.replace("`", "")
        if "--json" not in plain:
            continue
        # "kcache push --json and kcache pull --json" documents both; KEY-PREFIX may follow
        for part in re.split(r"\band\b|,", plain):
            if part.split()[:len(words)] == words and "--json" in part:
                return f"{page}#{anchor(text)}"
    return None


def _cell(text: str) -> str:
    return text.replace("|", "\\|") if text else ""


def _option_row(o: Option) -> str:
    names = ", ".join(f"`{f}`" for f in o.flags)
    value = f"`{o.metavar}`" if o.takes_value and o.metavar else ""
    if o.choices:
        value = " \\| ".join(f"`{c}`" for c in o.choices)
    default = f"`{o.default}`" if o.default not in (None, False, "") else ""
    return f"| {names} | {value} | {default} | {_cell(o.help)} |"


def _positional_row(p: Positional) -> str:
    value = " \\| ".join(f"`{c}`" for c in p.choices) if p.choices else ""
    many = {"*": " (any number)", "+": " (one or more)", "?": " (optional)"}.get(p.nargs, "")
    return f"| `{p.metavar}`{many} | {value} | | {_cell(p.help)} |"


COMMON = ("--dir", "--json", "--wide", "-h")


def command_section(cmd: Command, found) -> list[str]:
    """The Markdown of one command."""
    lines = [f"### `{cmd.name}`", ""]
    if cmd.help:
        lines += [cmd.help[0].upper() + cmd.help[1:] + ("" if cmd.help.endswith(".") else "."), ""]
    if cmd.description and cmd.description != cmd.help:
        lines += [cmd.description, ""]
    lines += ["```", f"usage: {cmd.usage}", "```", ""]
    rows = [_positional_row(p) for p in cmd.positionals]
    rows += [_option_row(o) for o in cmd.options if o.flags[0] not in COMMON]
    if cmd.commands:
        rows += [f"| `{c.path[-1]}` | | | {_cell(c.help)} (below) |" for c in cmd.commands]
    if rows:
        lines += ["| argument | value | default | meaning |", "| --- | --- | --- | --- |", *rows, ""]
    if any(o.flags[0] == "--json" for o in cmd.options) and cmd.path[0] != "completion":
        link = json_schema_link(cmd, found)
        if link is None and len(cmd.path) > 1:  # `config get` is documented with `config`
            parent = Command(cmd.path[:1], "", "", "", [], [], [])
            link = json_schema_link(parent, found)
        lines += [f"JSON output (`--json`): [schema]({link})." if link else
                  "JSON output (`--json`): no schema documented in docs/ yet.", ""]
    if len(cmd.path) == 1:
        one = EXIT_ONE.get(cmd.path[0])
        lines += [f"Exit status: 0 ok; 1 {one}; 2 usage error." if one else
                  "Exit status: 0 ok; 1 a problem found or met; 2 usage error.", ""]
    return lines


def render(tree: Command | None = None, docs: Path = DOCS) -> str:
    """docs/cli-reference.md as text."""
    tree = tree or kcache_tree()
    found = headings(docs)
    common = [o for o in tree.options if o.flags[0] in COMMON]
    out = [
        "# `kcache` command reference",
        "",
        "Generated from the argument parser by `python -m kcache.cli.reference > "
        "docs/cli-reference.md`; do not edit by hand (tests/test_docs.py fails when this page "
        "and the parser disagree). What the commands do, their output forms and conventions: "
        "[cli.md](cli.md); a tour: [guide.md](guide.md).",
        "",
        "```",
        f"usage: {tree.usage}",
        "```",
        "",
        "## Commands",
        "",
        "| command | what it does |",
        "| --- | --- |",
    ]
    for cmd in tree.walk():
        if cmd.path:
            out.append(f"| [`{cmd.name}`](#{anchor(cmd.name)}) | {_cell(cmd.help)} |")
    out += [
        "",
        "## Options of every command",
        "",
        "Given before or after the command (`kcache --dir D ls` = `kcache ls --dir D`).",
        "",
        "| argument | value | default | meaning |",
        "| --- | --- | --- | --- |",
        *[_option_row(o) for o in common],
        "",
        "`kcache --version` prints the version.",
        "",
        "## Exit status",
        "",
        "| status | meaning |",
        "| --- | --- |",
        "| 0 | ok |",
        "| 1 | the operation found or met problems (each command below says which) |",
        "| 2 | usage error: a bad option, value or setting, one line on stderr naming what "
        "was wrong and what is accepted |",
        "| 130 | interrupted (Ctrl-C) |",
        "",
        "## Environment",
        "",
        "Precedence for every setting: command-line argument > environment > "
        "`<root>/config.json` > default. `kcache --help` lists the same.",
        "",
        "| variable | meaning | default | config.json key |",
        "| --- | --- | --- | --- |",
        *[f"| [`{v.name}`]({v.doc}) | {_cell(v.meaning)} | {_cell(v.default)} | "
          f"{f'`{v.config_key}`' if v.config_key else ''} |" for v in VARIABLES],
        "",
        "## Each command",
        "",
    ]
    for cmd in tree.walk():
        if cmd.path:
            out += command_section(cmd, found)
    return "\n".join(out).rstrip("\n") + "\n"


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
