"""``kcache completion bash|zsh|fish``: print a shell completion script for ``kcache``.

The script is generated from the argument parser itself (:mod:`kcache.cli.spec`): every
command, nested command (``config set``), option and choice the parser knows, with help
texts for zsh and fish. Option values complete as the parser says: choices (``--sort``),
folders (``--dir PATH``, ``--extract DIR``), files (``--signatures FILE``, ``export OUT``).

Why a static script written here rather than a library: argcomplete runs the program (with
its Python start-up) at every TAB and needs either a global hook or an ``eval`` per command
in the user's shell start-up; shtab generates static scripts from argparse too, but has no
fish and would be a new dependency for ~150 lines. A static script costs nothing per TAB and
follows the parser because it is generated from it.
"""
from __future__ import annotations

import shlex

from kcache.cli.args import want_json
from kcache.cli.errors import UsageError
from kcache.cli.spec import Command, kcache_tree

SHELLS = ("bash", "zsh", "fish")

#: What the help says to run; the folder is made first: a new user has none of them yet.
INSTALL = {
    "bash": "mkdir -p ~/.local/share/bash-completion/completions && "
            "kcache completion bash > ~/.local/share/bash-completion/completions/kcache",
    "zsh": "kcache completion zsh > \"${fpath[1]}/_kcache\"  (any folder on $fpath; then "
           "restart zsh), or: source <(kcache completion zsh)",
    "fish": "mkdir -p ~/.config/fish/completions && "
            "kcache completion fish > ~/.config/fish/completions/kcache.fish",
}


def register(sub):
    """Add the ``completion`` subparser to ``sub``; return it."""
    p = sub.add_parser(
        "completion", help="print a shell completion script (bash, zsh, fish)",
        description="Print a completion script for SHELL on stdout, generated from kcache's "
                    "argument parser. Install it with: " + "; ".join(
                        f"{shell}: {how}" for shell, how in INSTALL.items()))
    p.add_argument("shell", metavar="SHELL", choices=SHELLS, help="bash, zsh or fish")
    return p


def run(args) -> int:
    """Print the script; ``--json`` is refused (exit 2): a script is not a JSON document."""
    if want_json(args):
        raise UsageError("completion prints a shell script, not JSON: --json is not accepted "
                         "(use 'kcache completion bash|zsh|fish')")
    tree = kcache_tree()
    print({"bash": bash, "zsh": zsh, "fish": fish}[args.shell](tree), end="")
    return 0


# --- the parts every script shares ---------------------------------------------------------

def _value_spec(kind: str, choices) -> str:
    """The value word the scripts dispatch on: ``choices:a b``, ``dir``, ``file``, ``text``."""
    return "choices:" + " ".join(choices) if kind == "choices" else kind


def _tables(tree: Command):
    """Per command path ("" for kcache itself, "config set"): sub-commands, options, value
    options (flag -> value spec) and the positionals' value spec."""
    for cmd in tree.walk():
        path = " ".join(cmd.path)
        values = {flag: _value_spec(o.value_kind, o.choices)
                  for o in cmd.options if o.takes_value for flag in o.flags}
        positional = ""
        for p in cmd.positionals:
            if p.value_kind != "text":
                positional = _value_spec(p.value_kind, p.choices)
                break
        yield cmd, path, values, positional


def _q(text: str) -> str:
    """Single-quoted for bash and zsh (both read '...' the POSIX way)."""
    return shlex.quote(text)


# --- bash -----------------------------------------------------------------------------------

BASH_MAIN = r'''
_kcache_complete_value() {
    case "$1" in
        choices:*) COMPREPLY=($(compgen -W "${1#choices:}" -- "$2")) ;;
        dir) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -d -- "$2")) ;;
        file) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- "$2")) ;;
        *) COMPREPLY=() ;;
    esac
}

_kcache() {
    local cur="${COMP_WORDS[COMP_CWORD]}" path="" skip="" i w subs
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${COMP_WORDS[i]}"
        if [[ -n $skip ]]; then skip=""; continue; fi
        if [[ $w == -* ]]; then
            [[ $w != *=* && -n $(_kcache_value "$path" "$w") ]] && skip=1
            continue
        fi
        [[ " $(_kcache_subcommands "$path") " == *" $w "* ]] && path="${path:+$path }$w"
    done
    if [[ -n $skip ]]; then
        _kcache_complete_value "$(_kcache_value "$path" "${COMP_WORDS[COMP_CWORD-1]}")" "$cur"
    elif [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$(_kcache_options "$path")" -- "$cur"))
    else
        subs="$(_kcache_subcommands "$path")"
        if [[ -n $subs ]]; then
            COMPREPLY=($(compgen -W "$subs" -- "$cur"))
        else
            _kcache_complete_value "$(_kcache_positional "$path")" "$cur"
        fi
    fi
    return 0
}

complete -F _kcache kcache
'''


def bash(tree: Command) -> str:
    """The bash completion script (bash 4+, bash-completion not required)."""
    subs, opts, vals, poss = [], [], [], []
    for cmd, path, values, positional in _tables(tree):
        if cmd.commands:
            subs.append(f"        {_q(path)}) echo {_q(' '.join(c.path[-1] for c in cmd.commands))} ;;")
        opts.append(f"        {_q(path)}) echo {_q(' '.join(f for o in cmd.options for f in o.flags))} ;;")
        for flag, spec in values.items():
            vals.append(f"        {_q(path + '|' + flag)}) echo {_q(spec)} ;;")
        if positional:
            poss.append(f"        {_q(path)}) echo {_q(positional)} ;;")

    def fn(name, doc, arg, rows):
        return "\n".join([f"{name}() {{  # {doc}", f'    case "{arg}" in', *rows, "    esac", "}"])

    return "\n".join([
        "# bash completion for kcache, generated from its argument parser by",
        f"# `kcache completion bash`. Install: {INSTALL['bash']}",
        "",
        fn("_kcache_subcommands", "$1: command path -> its sub-commands", "$1", subs),
        fn("_kcache_options", "$1: command path -> its options", "$1", opts),
        fn("_kcache_value", "$1 path, $2 option -> how its value completes (none: a flag)",
           "$1|$2", vals),
        fn("_kcache_positional", "$1 path -> how its positional argument completes", "$1", poss),
    ]) + "\n" + BASH_MAIN


# --- zsh ------------------------------------------------------------------------------------

ZSH_MAIN = r'''
_kcache_complete_value() {
    case "$1" in
        choices:*) compadd -- ${=1#choices:} ;;
        dir) _files -/ ;;
        file) _files ;;
        *) _message 'value' ;;
    esac
}

_kcache() {
    local cur="${words[CURRENT]}" path="" skip="" i w
    local -a described
    for ((i = 2; i < CURRENT; i++)); do
        w="${words[i]}"
        if [[ -n $skip ]]; then skip=""; continue; fi
        if [[ $w == -* ]]; then
            [[ $w != *=* && -n $(_kcache_value "$path" "$w") ]] && skip=1
            continue
        fi
        [[ " $(_kcache_subcommand_names "$path") " == *" $w "* ]] && path="${path:+$path }$w"
    done
    if [[ -n $skip ]]; then
        _kcache_complete_value "$(_kcache_value "$path" "${words[CURRENT-1]}")"
    elif [[ $cur == -* ]]; then
        described=("${(@f)$(_kcache_options "$path")}")
        _describe -t options 'option' described
    elif [[ -n $(_kcache_subcommand_names "$path") ]]; then
        described=("${(@f)$(_kcache_subcommands "$path")}")
        _describe -t commands 'command' described
    else
        _kcache_complete_value "$(_kcache_positional "$path")"
    fi
}

if [[ ${zsh_eval_context[-1]} == loadautofunc ]]; then
    _kcache "$@"
else
    compdef _kcache kcache
fi
'''


def _described(name: str, help_text: str) -> str:
    """One ``name:help`` item of zsh's ``_describe`` (colons in the name escaped)."""
    return name.replace(":", r"\:") + (":" + help_text if help_text else "")


def zsh(tree: Command) -> str:
    """The zsh completion script (autoloadable as ``_kcache`` or sourced)."""
    subs, names, opts, vals, poss = [], [], [], [], []
    for cmd, path, values, positional in _tables(tree):
        if cmd.commands:
            lines = "\n".join(_described(c.path[-1], c.help) for c in cmd.commands)
            subs.append(f"        {_q(path)}) print -r -- {_q(lines)} ;;")
            names.append(f"        {_q(path)}) print -r -- {_q(' '.join(c.path[-1] for c in cmd.commands))} ;;")
        lines = "\n".join(_described(f, o.help) for o in cmd.options for f in o.flags)
        opts.append(f"        {_q(path)}) print -r -- {_q(lines)} ;;")
        for flag, spec in values.items():
            vals.append(f"        {_q(path + '|' + flag)}) print -r -- {_q(spec)} ;;")
        if positional:
            poss.append(f"        {_q(path)}) print -r -- {_q(positional)} ;;")

    def fn(name, doc, arg, rows):
        return "\n".join([f"{name}() {{  # {doc}", f'    case "{arg}" in', *rows, "    esac", "}"])

    return "\n".join([
        "#compdef kcache",
        "# zsh completion for kcache, generated from its argument parser by",
        f"# `kcache completion zsh`. Install: {INSTALL['zsh']}",
        "",
        fn("_kcache_subcommands", "$1: command path -> name:help lines", "$1", subs),
        fn("_kcache_subcommand_names", "$1: command path -> its sub-command names", "$1", names),
        fn("_kcache_options", "$1: command path -> option:help lines", "$1", opts),
        fn("_kcache_value", "$1 path, $2 option -> how its value completes (none: a flag)",
           "$1|$2", vals),
        fn("_kcache_positional", "$1 path -> how its positional argument completes", "$1", poss),
    ]) + "\n" + ZSH_MAIN


# --- fish -----------------------------------------------------------------------------------

FISH_MAIN = r'''
function __kcache_path --description 'the kcache command path on the command line'
    set -l words (commandline -opc)
    set -e words[1]
    set -l path
    set -l skip 0
    for w in $words
        if test $skip = 1
            set skip 0
            continue
        end
        if string match -q -- '-*' $w
            if not string match -q -- '*=*' $w
                and contains -- $w (__kcache_value_options (string join ' ' -- $path))
                set skip 1
            end
            continue
        end
        if contains -- $w (__kcache_subcommands (string join ' ' -- $path))
            set -a path $w
        end
    end
    string join ' ' -- $path
end

function __kcache_at --description 'true when the command path is $argv[1]'
    set -l p (__kcache_path)
    test "$p" = "$argv[1]"
end

complete -c kcache -f
'''


def _fish_q(text: str) -> str:
    """Single-quoted for fish (which escapes only \\ and ' inside '...')."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish_flag(flag: str) -> str:
    if flag.startswith("--"):
        return f"-l {_fish_q(flag[2:])}"
    if len(flag) == 2:
        return f"-s {_fish_q(flag[1:])}"
    return f"-o {_fish_q(flag[1:])}"


def _fish_value(spec: str) -> str:
    if spec.startswith("choices:"):
        return f"-x -a {_fish_q(spec[len('choices:'):])}"
    if spec == "dir":
        return "-x -a '(__fish_complete_directories)'"
    if spec == "file":
        return "-r -F"
    return "-x"


def fish(tree: Command) -> str:
    """The fish completion script."""
    subs, valopts, lines = [], [], []
    for cmd, path, values, positional in _tables(tree):
        at = f"-n {_fish_q('__kcache_at ' + _fish_q(path))}"
        if cmd.commands:
            subs.append(f"        case {_fish_q(path)}\n            printf '%s\\n' "
                        + " ".join(_fish_q(c.path[-1]) for c in cmd.commands))
            for c in cmd.commands:
                lines.append(f"complete -c kcache {at} -a {_fish_q(c.path[-1])} -d {_fish_q(c.help)}")
        if values:
            valopts.append(f"        case {_fish_q(path)}\n            printf '%s\\n' "
                           + " ".join(_fish_q(f) for f in values))
        for o in cmd.options:
            spec = values.get(o.flags[0]) if o.takes_value else None
            flags = " ".join(_fish_flag(f) for f in o.flags)
            value = f" {_fish_value(spec)}" if spec else ""
            lines.append(f"complete -c kcache {at} {flags}{value} -d {_fish_q(o.help)}")
        if positional and not cmd.commands:
            lines.append(f"complete -c kcache {at} {_fish_value(positional)}")

    def fn(name, doc, cases):
        return "\n".join([f"function {name} --description {_fish_q(doc)}", "    switch $argv[1]",
                          *cases, "    end", "end"])

    return "\n".join([
        "# fish completion for kcache, generated from its argument parser by",
        f"# `kcache completion fish`. Install: {INSTALL['fish']}",
        "",
        fn("__kcache_subcommands", "sub-commands of a kcache command path", subs),
        fn("__kcache_value_options", "options of a kcache command path that take a value",
           valopts),
    ]) + "\n" + FISH_MAIN + "\n".join(lines) + "\n"
