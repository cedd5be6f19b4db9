"""The child process of the hostile-file harness (run as a script, never imported).

``_child.py get SPEC`` looks up the hostile key and the valid keys with ``Store.get`` (a
user's program), then runs the post-check; ``_child.py cli SPEC -- ARGV...`` runs the
``kcache`` command in this process exactly as the console script does
(``SystemExit(kcache.cli.main())``), then the post-check.

The post-check (a fresh Store, warnings reset, output redirected away from the command's)
records whether each valid key is still served with its artifacts and whether a put of a
new key and a get of it work (a fault of one entry or auxiliary file affects nothing else).
Results go to the JSON file named in SPEC, never to stdout (which may be a terminal).
"""
import json
import os
import sys
import traceback
import warnings

sys.path.pop(0)  # this folder: its modules are not for the child


def _peak_bytes() -> dict:
    """This process's peak resident and virtual memory (VmHWM, VmPeak), bytes. (Not
    ``ru_maxrss``: Linux keeps the forked parent's high-water mark across exec.)"""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("VmHWM", "VmPeak"):
                out[name] = int(value.split()[0]) * 1024
    return out


def _lookup(store, keys, artifacts):
    out = {}
    for key in keys:
        ent = store.get(key)
        if ent is None:
            out[key] = "miss"
        else:
            out[key] = "hit" if ent.artifacts == artifacts else "hit, wrong artifacts"
    return out


def _state(path) -> str:
    """What is at ``path`` (never followed): absent, file, folder, symlink, FIFO, ..."""
    import stat
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return "absent"
    for test, name in ((stat.S_ISREG, "file"), (stat.S_ISDIR, "folder"), (stat.S_ISLNK, "symlink"),
                       (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "device")):
        if test(mode):
            return name
    return "other"


def _artifacts(spec):
    return {k: bytes.fromhex(v) for k, v in spec["artifacts"].items()}


def post_check(spec, result) -> None:
    """Runs after the command, with stdout/stderr redirected to SPEC['post_log']."""
    import logging

    log_fd = os.open(spec["post_log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    logging.getLogger("kcache").handlers.clear()
    from kcache import ConfigError, Entry, Store, warn
    try:
        warn.reset()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                store = Store()
            except ConfigError as exc:  # documented: a bad setting (kcache.jit: uncached)
                result["post_store_error"] = f"ConfigError: {exc}"
                return
            result["post_get"] = _lookup(store, spec["survivors"], _artifacts(spec))
            fresh = Entry({"cubin": b"fresh cubin"}, {"kernel": "pkg.mod:fresh"})
            ok = store.put(spec["fresh_key"], fresh)
            back = store.get(spec["fresh_key"])
            result["post_put"] = bool(ok) and back is not None and back.artifacts == fresh.artifacts
            store.flush()
        result["post_warnings"] = [str(w.message) for w in caught]
    except BaseException:
        result["post_error"] = traceback.format_exc()


def main() -> int:
    mode, spec_path = sys.argv[1], sys.argv[2]
    with open(spec_path) as f:
        spec = json.load(f)
    result = {}
    rc = 0
    if mode == "get":
        from kcache import ConfigError, Store
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                try:
                    store = Store()
                except ConfigError as exc:  # documented: a bad setting (kcache.jit: uncached)
                    result["store_error"] = f"ConfigError: {exc}"
                    raise SystemExit(0) from None
                ent = store.get(spec["key"])
                result["hostile"] = "miss" if ent is None else "hit"
                if ent is not None:
                    result["hostile_artifacts"] = sorted(ent.artifacts)
                result["valid"] = _lookup(store, spec["valid_keys"], _artifacts(spec))
                again = store.get(spec["key"])  # a bad file is judged (and counted) once
                result["hostile_again"] = "miss" if again is None else "hit"
                result["corrupt"] = store.stats().corrupt
                result["after_gets"] = _state(spec["hostile_path"])
                # what a program does next on that miss: compile and store the kernel
                if ent is None:
                    from kcache import Entry
                    result["hostile_put"] = store.put(spec["key"], Entry(
                        {"cubin": b"recompiled"}, {"kernel": "pkg.mod:hostile"}))
                store.flush()
            except SystemExit:
                pass
            except BaseException:
                traceback.print_exc()
                rc = 1
        result["warnings"] = [str(w.message) for w in caught]
    else:
        argv = sys.argv[sys.argv.index("--") + 1:]
        from kcache.cli import main as cli_main
        try:
            rc = cli_main(argv)
        except SystemExit as exc:  # argparse, or a command raising it
            code = exc.code
            rc = code if isinstance(code, int) else (0 if code is None else 1)
            if code is not None and not isinstance(code, int):
                sys.stderr.write(f"{code}\n")
        except BaseException:  # what the interpreter would print for an uncaught exception
            traceback.print_exc()
            rc = 1
    result["rc"] = rc
    peaks = _peak_bytes()
    result["peak_bytes"] = peaks.get("VmHWM")
    result["peak_vm_bytes"] = peaks.get("VmPeak")
    post_check(spec, result)
    with open(spec["result"], "w") as f:
        json.dump(result, f)
    return rc


if __name__ == "__main__":
    sys.exit(main())
