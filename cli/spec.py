"""The ``kcache`` argument parser's structure as plain data: commands (nested: ``config set``,
``remote check``), their options and positionals, with help texts and choices.

Read by the shell completion (``kcache completion``) and the generated CLI reference
(``python -m kcache.cli.reference``), so both follow the parser: a flag added to a command's
``register`` appears in both with no other edit.

argparse has no public API to walk a parser, so this reads ``parser._actions`` and the
``_SubParsersAction`` choices (stable since Python 3.2, and what argcomplete, sphinx-argparse
and shtab read too). Everything argparse-private stays in this module.
"""
from __future__ import annotations

import argparse
import dataclasses

#: Metavars whose values are paths: completed as folders or as files.
DIR_METAVARS = ("PATH", "DIR")
FILE_METAVARS = ("FILE", "OUT", "IN", "TARGET", "SIGNATURES")


@dataclasses.dataclass
class Option:
    """An optional argument: ``flags`` (e.g. ``["--dir"]``), ``takes_value``, ``metavar``,
    ``choices`` (or None), ``help``, ``default`` (None when argparse's is SUPPRESS/None)."""

    flags: list[str]
    takes_value: bool
    metavar: str | None
    choices: list[str] | None
    help: str
    default: object = None

    @property
    def value_kind(self) -> str:
        """How a shell completes the value: ``choices``, ``dir``, ``file`` or ``text``."""
        return _value_kind(self.choices, self.metavar)


@dataclasses.dataclass
class Positional:
    """A positional argument: ``metavar``, ``help``, ``choices``, ``nargs`` (argparse's)."""

    metavar: str
    help: str
    choices: list[str] | None
    nargs: object = None

    @property
    def value_kind(self) -> str:
        return _value_kind(self.choices, self.metavar)


@dataclasses.dataclass
class Command:
    """A parser: ``path`` (``()`` for ``kcache`` itself, ``("config", "set")``), its
    ``help`` (the one line its parent lists), ``description``, ``usage``, ``options``,
    ``positionals`` and sub-``commands`` in the order the parser lists them."""

    path: tuple[str, ...]
    help: str
    description: str
    usage: str
    options: list[Option]
    positionals: list[Positional]
    commands: list["Command"]

    @property
    def name(self) -> str:
        return " ".join(("kcache", *self.path))

    def walk(self):
        """This command, then every sub-command, depth first."""
        yield self
        for sub in self.commands:
            yield from sub.walk()

    def value_options(self) -> list[str]:
        """Every flag of this command that takes a value."""
        return [f for o in self.options if o.takes_value for f in o.flags]


def _value_kind(choices, metavar) -> str:
    if choices:
        return "choices"
    base = (metavar or "").upper().split("-")[0]
    if base in DIR_METAVARS:
        return "dir"
    if base in FILE_METAVARS:
        return "file"
    return "text"


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    if text == argparse.SUPPRESS:
        return ""
    return " ".join(text.split())


def _choices(action: argparse.Action) -> list[str] | None:
    if action.choices is None or isinstance(action, argparse._SubParsersAction):
        return None
    return [str(c) for c in action.choices]


def describe(parser: argparse.ArgumentParser, path: tuple[str, ...] = (), help: str = "") -> Command:
    """The :class:`Command` tree of ``parser`` (``kcache.cli.main.build_parser()``)."""
    options, positionals, commands = [], [], []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: _help(a) for a in action._choices_actions}
            seen = set()
            for name, sub in action.choices.items():
                if id(sub) in seen:  # an alias names the same parser
                    continue
                seen.add(id(sub))
                commands.append(describe(sub, (*path, name), helps.get(name, "")))
        elif action.option_strings:
            if action.help == argparse.SUPPRESS:
                continue
            default = action.default
            if default in (argparse.SUPPRESS, None) or isinstance(action, (
                    argparse._StoreTrueAction, argparse._StoreFalseAction,
                    argparse._HelpAction, argparse._VersionAction)):
                default = None
            options.append(Option(
                flags=list(action.option_strings), takes_value=action.nargs != 0,
                metavar=_metavar(action), choices=_choices(action), help=_help(action),
                default=default))
        else:
            positionals.append(Positional(metavar=_metavar(action) or action.dest,
                                          help=_help(action), choices=_choices(action),
                                          nargs=action.nargs))
    return Command(path=path, help=help, description=" ".join((parser.description or "").split()),
                   usage=" ".join(parser.format_usage().split())[len("usage: "):],
                   options=options, positionals=positionals, commands=commands)


def _metavar(action: argparse.Action) -> str | None:
    if action.nargs == 0:
        return None
    if isinstance(action.metavar, tuple):
        return " ".join(action.metavar)
    if action.metavar:
        return action.metavar
    if action.choices:
        return "{" + ",".join(str(c) for c in action.choices) + "}"
    return action.dest.upper()


def kcache_tree() -> Command:
    """The whole ``kcache`` parser, every command registered, as a :class:`Command`."""
    from kcache.cli.main import build_parser
    return describe(build_parser())
