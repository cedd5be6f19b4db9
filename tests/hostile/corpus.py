"""The hostile kinds: what is planted where in an otherwise valid cache.

Each :class:`Kind` has a builder ``build(case)`` that plants its file(s) into a fresh copy of
a real cache (:class:`tests.hostile.harness.Case`): at the entry path of the hostile key
(``<root>/v1/entries/ab/<key>.kce``), at that key's shard folder, or at an auxiliary path
(stats shards, locks, config.json, toolchain memo, quarantine). Canary files outside the root
(``case.outside``) exist in every case; symlinks point into them.

``served``: whether ``Store.get`` of the hostile key may return an entry (True only for files
that are valid entries whose *content* is odd but allowed: markup in a kernel name, a pickle
payload as an inert artifact, ...; None: either is acceptable, the table says which).
``mem``: bytes of address space allowed beyond the interpreter's base, for kinds whose file is
legitimately large (the trust rule: peak memory is a small multiple of the file's size plus a
constant). ``target``: which key ``show``/``rm`` name ("hostile", or "valid" for auxiliary
kinds that plant no entry). ``root_only``: needs root (chown, mknod).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import stat
from typing import Callable

from kcache.store.stats import SHARDS

from .craft import ARTIFACTS, META, entry_file, header_fields, pack, raw_map

MiB = 1 << 20
GiB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Kind:
    name: str
    title: str
    build: Callable
    where: str = "entry"  # entry | shard | aux | layer
    served: bool | None = False
    mem: int = 0
    target: str = "hostile"
    root_only: bool = False
    slow: bool = False
    refused: bool = False  # the whole root is not trusted, by design: uncached, one warning
    bad_setting: bool = False  # a bad value in config.json: a ConfigError, by design
    warns: str | None = None  # text Store.get must warn
    commands: tuple = ()  # commands run on this kind beyond the usual ones (harness.EXTRA)
    #: what ``verify --fix`` must do with the hostile entry file: "quarantined" (exit 0, moved),
    #: "left" (exit 1, still there: it cannot be moved), "untouched" (not corrupt: a newer
    #: format), None: not checked. Default: "quarantined" for a file at the entry path of the
    #: writable root that must not be served.
    fix: str | None = "default"
    outside_mtime_ok: tuple = ()  # files outside whose mtime alone may change (a hard link)


KINDS: list[Kind] = []


def kind(name: str, title: str, **kw):
    def deco(fn):
        KINDS.append(Kind(name, title, fn, **kw))
        return fn
    return deco


# ---------------------------------------------------------------------------- helpers

def plant(case, data: bytes) -> None:
    """Write ``data`` as the hostile key's entry file."""
    path = case.entry_path
    path.parent.mkdir(mode=0o700, exist_ok=True)
    path.write_bytes(data)


def plant_header(case, **over) -> None:
    """A file with a valid envelope (both checksums right) whose header fields are ``over``
    (encoded msgpack values)."""
    plant(case, entry_file(case.key, **over))


def sparse(path, head: bytes, size: int) -> None:
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)


def _meta(**over) -> dict:
    meta = dict(META)
    meta.update(over)
    return meta


# ---------------------------------------------------------------------------- not a regular file

@kind("fifo", "FIFO named like an entry", warns="not a regular file")
def _(case):
    case.entry_path.parent.mkdir(mode=0o700, exist_ok=True)
    os.mkfifo(case.entry_path, 0o600)


@kind("socket", "unix socket named like an entry")
def _(case):
    case.entry_path.parent.mkdir(mode=0o700, exist_ok=True)
    os.mknod(case.entry_path, stat.S_IFSOCK | 0o600)


@kind("chardev", "character device (the /dev/zero node) named like an entry", root_only=True)
def _(case):
    case.entry_path.parent.mkdir(mode=0o700, exist_ok=True)
    os.mknod(case.entry_path, stat.S_IFCHR | 0o600, os.makedev(1, 5))


@kind("directory", "folder named like an entry (holding a file)")
def _(case):
    case.entry_path.mkdir(parents=True, mode=0o700)
    (case.entry_path / "inside.txt").write_bytes(b"a file inside a folder named like an entry\n")


@kind("symlink-outside", "symlink to a valid entry for this key outside the root",
      warns="a symlink, never followed")
def _(case):
    case.entry_path.parent.mkdir(mode=0o700, exist_ok=True)
    os.symlink(case.outside / "planted.kce", case.entry_path)


@kind("symlink-devzero", "symlink to /dev/zero")
def _(case):
    case.entry_path.parent.mkdir(mode=0o700, exist_ok=True)
    os.symlink("/dev/zero", case.entry_path)


@kind("symlink-fifo", "symlink to a FIFO outside the root")
def _(case):
    case.entry_path.parent.mkdir(mode=0o700, exist_ok=True)
    os.symlink(case.outside / "fifo", case.entry_path)


@kind("symlink-dir", "symlink to a folder outside the root")
def _(case):
    case.entry_path.parent.mkdir(mode=0o700, exist_ok=True)
    os.symlink(case.outside / "dir", case.entry_path)


@kind("symlink-dangling", "dangling symlink")
def _(case):
    case.entry_path.parent.mkdir(mode=0o700, exist_ok=True)
    os.symlink(case.outside / "no-such-file", case.entry_path)


@kind("symlink-loop", "symlink to itself (ELOOP)")
def _(case):
    case.entry_path.parent.mkdir(mode=0o700, exist_ok=True)
    os.symlink(case.entry_path.name, case.entry_path)


@kind("hardlink-outside", "hard link to a valid entry for this key outside the root (the "
      "same file: a hit records its use in its mtime)", served=True,
      outside_mtime_ok=("outside/planted.kce",))
def _(case):
    case.entry_path.parent.mkdir(mode=0o700, exist_ok=True)
    os.link(case.outside / "planted.kce", case.entry_path)


@kind("other-uid", "valid entry owned by another user (uid 12345)", root_only=True,
      warns="owned by another user")
def _(case):
    plant(case, case.valid_bytes())
    os.chown(case.entry_path, 12345, 12345)


@kind("mode-0", "valid entry with mode 0 (unreadable except by root)",
      served=os.geteuid() == 0)
def _(case):
    plant(case, case.valid_bytes())
    os.chmod(case.entry_path, 0)


# ---------------------------------------------------------------------------- shard folders

@kind("shard-symlink", "the key's shard folder is a symlink to a folder outside the root "
      "holding a valid entry for this key", where="shard", warns="is a symlink")
def _(case):
    os.symlink(case.outside / "shard", case.entry_path.parent)


@kind("shard-fifo", "the key's shard folder is a FIFO", where="shard")
def _(case):
    os.mkfifo(case.entry_path.parent, 0o600)


@kind("shard-file", "the key's shard folder is a regular file", where="shard")
def _(case):
    case.entry_path.parent.write_bytes(b"not a folder\n")


# ---------------------------------------------------------------------------- size and envelope

@kind("sparse-4g-bad-magic", "sparse 4 GiB file with a bad magic", warns="file too large")
def _(case):
    case.entry_path.parent.mkdir(mode=0o700, exist_ok=True)
    sparse(case.entry_path, b"NOTKCACHE" * 8, 4 * GiB)


@kind("sparse-4g-valid-prefix", "sparse 4 GiB file whose prefix is valid and whose lengths "
      "agree with its size", warns="file too large")
def _(case):
    case.entry_path.parent.mkdir(mode=0o700, exist_ok=True)
    hlen, blen = 16 * MiB, 4 * GiB
    head = entry_file(case.key)[:8 + 2 + 2]
    from .craft import PREFIX
    prefix = PREFIX.pack(head[:8], 1, 0, hlen, blen, bytes(16))
    sparse(case.entry_path, prefix, len(prefix) + hlen + blen + 32)


@kind("sparse-200m-valid-prefix", "sparse 200 MiB file (under the 256 MiB entry cap) with a "
      "valid prefix, zero body, wrong checksum", mem=3 * 200 * MiB, slow=True)
def _(case):
    case.entry_path.parent.mkdir(mode=0o700, exist_ok=True)
    good = entry_file(case.key)
    from .craft import PREFIX
    hlen = PREFIX.unpack_from(good)[3]
    size = 200 * MiB
    blen = size - PREFIX.size - hlen - 32
    prefix = PREFIX.pack(good[:8], 1, 0, hlen, blen, good[24:40])
    sparse(case.entry_path, prefix + good[PREFIX.size:PREFIX.size + hlen], size)


@kind("sparse-200m-bad-magic", "sparse 200 MiB file (under the 256 MiB entry cap) with a bad "
      "magic: judged by its first bytes, never read whole (no memory allowance)",
      warns="bad magic")
def _(case):
    case.entry_path.parent.mkdir(mode=0o700, exist_ok=True)
    sparse(case.entry_path, b"NOTKCACHE" * 8, 200 * MiB)


@kind("zero-length", "zero-length file")
def _(case):
    plant(case, b"")


@kind("truncated-prefix", "first 20 bytes of a valid entry")
def _(case):
    plant(case, case.valid_bytes()[:20])


@kind("truncated-body", "valid entry missing its last 40 bytes")
def _(case):
    plant(case, case.valid_bytes()[:-40])


@kind("trailing-garbage", "valid entry followed by 1 KiB of garbage")
def _(case):
    plant(case, case.valid_bytes() + os.urandom(1024))


@kind("bad-magic", "valid entry with a wrong magic")
def _(case):
    data = case.valid_bytes()
    plant(case, b"KCACHE\x00X" + data[8:])


@kind("older-version-sum", "format version 0, checksum valid")
def _(case):
    plant(case, entry_file(case.key, version=0))


@kind("older-version-nosum", "format version 0, checksum wrong")
def _(case):
    plant(case, entry_file(case.key, version=0, checksum=False))


@kind("newer-version-sum", "format version 2, checksum valid", fix="untouched")
def _(case):
    plant(case, entry_file(case.key, version=2))


@kind("newer-version-nosum", "format version 2, checksum wrong")
def _(case):
    plant(case, entry_file(case.key, version=2, checksum=False))


@kind("version-65535", "format version 65535, checksum valid", fix="untouched")
def _(case):
    plant(case, entry_file(case.key, version=0xFFFF))


@kind("flags-set", "flags field 0xffff (must be 0), checksums valid")
def _(case):
    plant(case, entry_file(case.key, flags=0xFFFF))


@kind("absurd-lengths", "header_len 2**32-1 and body_len 2**64-1")
def _(case):
    plant(case, entry_file(case.key, header_len=2**32 - 1, body_len=2**64 - 1))


@kind("lengths-vs-size", "lengths that disagree with the file size (header_len +1000)")
def _(case):
    good = entry_file(case.key)
    from .craft import PREFIX
    hlen = PREFIX.unpack_from(good)[3]
    plant(case, entry_file(case.key, header_len=hlen + 1000))


@kind("header-sum-wrong", "header sum wrong, trailing checksum valid")
def _(case):
    plant(case, entry_file(case.key, header_sum=bytes(16)))


@kind("checksum-wrong", "valid entry with one payload bit flipped")
def _(case):
    data = bytearray(case.valid_bytes())
    data[-60] ^= 1
    plant(case, bytes(data))


@kind("sums-not-digests", "per-artifact sums of the wrong types (text, an integer), "
      "checksums valid")
def _(case):
    plant_header(case, sums=pack({"cubin": "0" * 64, "ptx": 5}))


@kind("sums-wrong", "per-artifact SHA-256 sums that match nothing, checksums valid (a hit "
      "judges the file by the whole check: a valid entry)", served=True)
def _(case):
    plant_header(case, sums=pack({name: bytes(32) for name in ARTIFACTS}))


@kind("trailer-only-wrong", "right per-artifact sums, only the trailing checksum wrong (a hit "
      "serves what it checked; verify reports the checksum)", served=True, fix=None)
def _(case):
    sums = {name: hashlib.sha256(data).digest() for name, data in ARTIFACTS.items()}
    plant(case, entry_file(case.key, checksum=False, sums=pack(sums)))


# ---------------------------------------------------------------------------- decoding bombs

@kind("header-16m-empty-arrays", "header of 16 MiB of empty arrays (one array of 16M empty "
      "arrays), checksums valid", mem=3 * 16 * MiB)
def _(case):
    n = 16 * MiB - 5
    plant(case, entry_file(case.key, header=b"\xdd" + n.to_bytes(4, "big") + b"\x90" * n))


@kind("header-deep-arrays", "header of 200,000 nested arrays, checksums valid")
def _(case):
    plant(case, entry_file(case.key, header=b"\x91" * 200_000 + b"\xc0"))


@kind("components-deep-maps-40", "components nested 40 maps deep, checksums valid")
def _(case):
    plant_header(case, components=b"\x81\xa1a" * 40 + b"\x01")


@kind("components-deep-maps-5000", "components nested 5,000 maps deep, checksums valid")
def _(case):
    plant_header(case, components=b"\x81\xa1a" * 5000 + b"\x01")


@kind("meta-deep-arrays", "meta holding 5,000 nested arrays, checksums valid")
def _(case):
    plant_header(case, meta=b"\x81\xa1x" + b"\x91" * 5000 + b"\xc0")


@kind("meta-16m-empty-maps", "VALID checksums, meta holding 16 MiB of empty maps",
      mem=3 * 16 * MiB)
def _(case):
    n = 16 * MiB - 400
    plant_header(case, meta=b"\x81\xa1x\xdd" + n.to_bytes(4, "big") + b"\x80" * n)


@kind("meta-200k-small-maps", "VALID checksums, meta holding 200,000 one-item maps (over the "
      "element limit, 2.2 MiB)", mem=8 * 3 * MiB)
def _(case):
    n = 200_000
    plant_header(case, meta=b"\x81\xa1x\xdd" + n.to_bytes(4, "big") + b"\x81\xa1k\x01" * n)


@kind("count-2g-array", "array header claiming 2**31 elements in meta (file of 1 KiB)")
def _(case):
    plant_header(case, meta=b"\x81\xa1x\xdd\x80\x00\x00\x00" + b"\xc0" * 16)


@kind("count-4g-map", "map header claiming 2**32-1 items in components")
def _(case):
    plant_header(case, components=b"\xdf\xff\xff\xff\xff" + b"\xc0" * 16)


@kind("str-4g-claim", "string claiming 4 GiB in meta")
def _(case):
    plant_header(case, meta=b"\x81\xa1x\xdb\xff\xff\xff\xff" + b"abc")


@kind("bin-4g-claim-body", "artifact bin claiming 4 GiB in the body")
def _(case):
    plant(case, entry_file(case.key, body=b"\x81\xa5cubin\xc6\xff\xff\xff\xff" + bytes(64)))


@kind("meta-15m-string", "VALID entry whose meta holds one 15 MiB string", served=None,
      mem=6 * 15 * MiB, slow=True)
def _(case):
    meta = _meta(notes="A" * (15 * MiB))
    plant_header(case, meta=pack(meta))


# ---------------------------------------------------------------------------- header values

@kind("ext-zero-length", "zero-length ext type in meta, checksums valid")
def _(case):
    plant_header(case, meta=b"\x81\xa1x\xc7\x00\x05")


@kind("ext-timestamp", "msgpack Timestamp (ext -1) as created, checksums valid")
def _(case):
    plant_header(case, created=b"\xd6\xff\x60\x00\x00\x00")


@kind("created-nan", "created = NaN, checksums valid")
def _(case):
    plant_header(case, created=pack(float("nan")))


@kind("created-inf", "created = +inf, checksums valid")
def _(case):
    plant_header(case, created=pack(float("inf")))


@kind("created-huge-int", "created = 2**64-1, checksums valid")
def _(case):
    plant_header(case, created=pack(2**64 - 1))


@kind("compile-seconds-nan", "compile_seconds = NaN in header and meta, checksums valid")
def _(case):
    plant_header(case, compile_seconds=pack(float("nan")),
                 meta=pack(_meta(compile_seconds=float("nan"))))


@kind("compile-seconds-inf", "compile_seconds = inf in header, -inf in meta, checksums valid")
def _(case):
    plant_header(case, compile_seconds=pack(float("inf")),
                 meta=pack(_meta(compile_seconds=float("-inf"))))


@kind("meta-bytes-keys", "bytes map keys in meta, checksums valid")
def _(case):
    plant_header(case, meta=b"\x82" + pack("kernel") + pack(META["kernel"]) + pack(b"k") + pack(1))


@kind("meta-int-keys", "integer map keys in components, checksums valid")
def _(case):
    plant_header(case, components=b"\x81\x01\x01")


@kind("bad-utf8", "invalid UTF-8 in the kernel name, checksums valid")
def _(case):
    plant_header(case, kernel=b"\xa4\xff\xfe\xfd\xfc")


@kind("header-not-map", "header is an array, checksums valid")
def _(case):
    plant(case, entry_file(case.key, header=pack([case.key, 1, 2])))


@kind("key-mismatch", "valid entry of another key at this key's path")
def _(case):
    plant(case, case.valid_bytes(case.valid_keys[0]))


@kind("signature-too-long", "signature of 100,000 characters, checksums valid")
def _(case):
    plant_header(case, signature=pack("x" * 100_000), meta=pack(_meta(signature="x" * 100_000)))


@kind("markup-names", "VALID entry: rich markup in kernel and signature ('[/bold]', "
      "'[red]', '[link=file:///etc/passwd]')", served=True)
def _(case):
    meta = _meta(kernel="pkg.mod:[/bold]k[link=file:///etc/passwd]x[/link]",
                 signature="[red](float32[::1],)[/]", arch="sm_90[/bold]")
    plant(case, case.valid_bytes(meta=meta))


@kind("escape-names", "VALID entry: terminal escapes and control characters in kernel, "
      "signature and meta ('\\x1b]0;pwned\\x07', '\\x1b[2J', newline, tab)", served=True)
def _(case):
    meta = _meta(kernel="pkg.mod:\x1b]0;pwned\x07k", signature="\x1b[2J(float32[::1],)\n\tx",
                 arch="sm_90\x1b[31m", note="\x1b]0;pwned\x07\x1b[2J\r")
    plant(case, case.valid_bytes(meta=meta))


@kind("long-names", "VALID entry: kernel name of 4,000 characters (a file name too long for "
      "--extract)", served=True)
def _(case):
    plant(case, case.valid_bytes(meta=_meta(kernel="pkg.mod:" + "k" * 3992)))


@kind("ptx-escapes", "VALID entry whose PTX holds terminal escape sequences (for show --ptx)",
      served=True, commands=("show --ptx", "show --ptx | cat"))
def _(case):
    ptx = b".version 8.5\n// \x1b]0;pwned\x07\x1b[2J\x1b[31m\n.target sm_90\n"
    plant(case, case.valid_bytes(artifacts={"cubin": ARTIFACTS["cubin"], "ptx": ptx}))


@kind("path-names", "VALID entry: kernel and arch names with '../' and '/' (for --extract)",
      served=True)
def _(case):
    meta = _meta(kernel="../../../../outside/evil", arch="../../../tmp/x")
    plant(case, case.valid_bytes(meta=meta))


# ---------------------------------------------------------------------------- body

@kind("artifacts-not-bytes", "artifacts map of name -> text, checksums valid")
def _(case):
    plant(case, entry_file(case.key, body=pack({"cubin": "text", "ptx": "x"}),
                           sizes=pack({"cubin": 4, "ptx": 1})))


@kind("artifacts-list", "artifacts are an array, checksums valid")
def _(case):
    plant(case, entry_file(case.key, body=pack([b"x", b"y"])))


@kind("artifacts-int-keys", "artifacts map with integer keys, checksums valid")
def _(case):
    plant(case, entry_file(case.key, body=b"\x81\x01" + pack(b"x")))


@kind("artifacts-65", "65 artifacts (limit 64), checksums valid")
def _(case):
    arts = {f"a{i}": b"x" for i in range(65)}
    plant(case, entry_file(case.key, body=pack(arts), sizes=pack({k: 1 for k in arts})))


@kind("sizes-disagree", "header sizes disagree with the artifacts, checksums valid")
def _(case):
    plant_header(case, sizes=pack({"cubin": 5, "ptx": 3}))


@kind("empty-body", "body of zero bytes, checksums valid")
def _(case):
    plant(case, entry_file(case.key, body=b""))


@kind("pickle-artifact", "VALID entry whose cubin is a pickle payload that would create a "
      "marker file if unpickled (must stay inert bytes)", served=True)
def _(case):
    payload = b"cos\nsystem\n(S'touch " + str(case.marker).encode() + b"'\ntR."
    plant(case, case.valid_bytes(artifacts={"cubin": payload, "ptx": payload}))


# ---------------------------------------------------------------------------- auxiliary files

def _stats_files(case, which: str):
    return [case.layout.stats_files(s)[{"counters": 0, "hits": 1, "lock": 2}[which]]
            for s in range(SHARDS)]


def _aux(name: str, title: str, **kw):
    kw.setdefault("target", "valid")
    return kind(name, title, where="aux", **kw)


def _replace(path, make) -> None:
    """Remove what is at ``path`` (file or folder) and make the hostile thing there."""
    import shutil
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    make(path)


@_aux("stats-fifo", "every stats shard (counters and hits) is a FIFO")
def _(case):
    for p in _stats_files(case, "counters") + _stats_files(case, "hits"):
        _replace(p, lambda q: os.mkfifo(q, 0o600))


@_aux("stats-dir", "every stats shard (counters and hits) is a folder")
def _(case):
    for p in _stats_files(case, "counters") + _stats_files(case, "hits"):
        _replace(p, lambda q: q.mkdir())


@_aux("stats-symlink", "every stats shard and its lock file is a symlink to a canary file "
      "outside the root")
def _(case):
    for p in _stats_files(case, "counters") + _stats_files(case, "hits") + _stats_files(case, "lock"):
        _replace(p, lambda q: os.symlink(case.outside / "canary.txt", q))


@_aux("stats-lock-fifo", "every stats shard lock file is a FIFO")
def _(case):
    for p in _stats_files(case, "lock"):
        _replace(p, lambda q: os.mkfifo(q, 0o600))


@_aux("stats-64m-nested", "stats shards of 64 MiB of nested maps", mem=3 * 64 * MiB, slow=True)
def _(case):
    bomb = (b"\x81\xa1a" * (64 * MiB // 3))[: 64 * MiB]
    for p in _stats_files(case, "counters")[:2] + _stats_files(case, "hits")[:2]:
        _replace(p, lambda q: q.write_bytes(bomb))


@functools.lru_cache(maxsize=1)
def _hits_2m() -> bytes:
    n = 2_000_000
    return b"\xdf" + n.to_bytes(4, "big") + b"".join(
        b"\xa6" + f"{i:06x}".encode() + b"\x01" for i in range(n))


@_aux("stats-hits-2m-keys", "a per-entry hits shard of 15 MiB: a flat map of 2M short keys "
      "(a dict of 2M items would cost ~250 MiB)", mem=4 * 16 * MiB, slow=True)
def _(case):
    for p in _stats_files(case, "hits")[:1]:
        _replace(p, lambda q: q.write_bytes(_hits_2m()))


@_aux("stats-nan", "stats shards holding NaN, inf and -inf counters and hits")
def _(case):
    bad = pack({"hits": float("nan"), "misses": float("inf"), "entries": float("-inf"),
                "bytes": float("nan"), "compile_seconds": float("inf"),
                "seconds_saved": float("nan"), "puts": 2**64 - 1})
    hits = pack({k: float("inf") for k in case.valid_keys})
    for p in _stats_files(case, "counters"):
        _replace(p, lambda q: q.write_bytes(bad))
    for p in _stats_files(case, "hits"):
        _replace(p, lambda q: q.write_bytes(hits))


@_aux("stats-folder-symlink", "v1/stats is a symlink to a folder outside the root")
def _(case):
    _replace(case.layout.stats, lambda q: os.symlink(case.outside / "dir", q))


@_aux("stats-folder-file", "v1/stats is a regular file")
def _(case):
    _replace(case.layout.stats, lambda q: q.write_bytes(b"not a folder\n"))


@_aux("toolchain-fifo", "toolchain memo is a FIFO")
def _(case):
    _replace(case.layout.toolchain_memo, lambda q: os.mkfifo(q, 0o600))


@_aux("toolchain-symlink", "toolchain memo is a symlink to a canary file outside the root")
def _(case):
    _replace(case.layout.toolchain_memo, lambda q: os.symlink(case.outside / "canary.txt", q))


@_aux("toolchain-sparse-4g", "toolchain memo is a sparse 4 GiB file")
def _(case):
    _replace(case.layout.toolchain_memo, lambda q: sparse(q, b"\x91", 4 * GiB))


@_aux("toolchain-deep", "toolchain memo of 100,000 nested arrays")
def _(case):
    _replace(case.layout.toolchain_memo, lambda q: q.write_bytes(b"\x91" * 100_000 + b"\xc0"))


@_aux("config-fifo", "config.json is a FIFO")
def _(case):
    _replace(case.layout.config, lambda q: os.mkfifo(q, 0o600))


@_aux("config-symlink-secret", "config.json is a symlink to a secret JSON file outside the "
      "root (max_size 1K, a secret string)")
def _(case):
    _replace(case.layout.config, lambda q: os.symlink(case.outside / "secret.json", q))


@_aux("config-sparse-4g", "config.json is a sparse 4 GiB file")
def _(case):
    _replace(case.layout.config, lambda q: sparse(q, b"{", 4 * GiB))


@_aux("config-deep-json", "config.json of 100,000 nested JSON arrays (under its 1 MiB cap)")
def _(case):
    _replace(case.layout.config, lambda q: q.write_bytes(b"[" * 100_000 + b"]" * 100_000))


@_aux("config-nan", "config.json with max_size NaN and lock_timeout Infinity", bad_setting=True)
def _(case):
    _replace(case.layout.config,
             lambda q: q.write_bytes(b'{"max_size": NaN, "lock_timeout": Infinity}'))


@_aux("config-dir", "config.json is a folder")
def _(case):
    _replace(case.layout.config, lambda q: q.mkdir())


def _evil_layer(case, mode: int, uid: int | None):
    """A folder outside the root holding a valid entry for the hostile key, named as a
    read-only layer by config.json."""
    import json
    layer = case.outside / "evil-layer"
    entry = layer / "v1" / "entries" / case.key[:2] / f"{case.key}.kce"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(case.valid_bytes())
    for p in (layer, layer / "v1", layer / "v1" / "entries", entry.parent, entry):
        if uid is not None:
            os.chown(p, uid, uid)
    for p in (layer, layer / "v1", layer / "v1" / "entries", entry.parent):
        os.chmod(p, mode)
    _replace(case.layout.config,
             lambda q: q.write_text(json.dumps({"readonly_dirs": [str(layer)]})))


@_aux("config-layer-other-uid", "config.json names a read-only layer outside the root owned by "
      "uid 12345 that holds a valid entry for the hostile key", root_only=True, target="hostile")
def _(case):
    _evil_layer(case, 0o755, 12345)


@_aux("config-layer-world-writable", "config.json names a world-writable read-only layer (mode "
      "777) outside the root that holds a valid entry for the hostile key", target="hostile")
def _(case):
    _evil_layer(case, 0o777, None)


@_aux("evict-lock-dir", "v1/locks/evict.lock is a folder")
def _(case):
    _replace(case.layout.evict_lock, lambda q: q.mkdir())


@_aux("evict-lock-symlink", "v1/locks/evict.lock is a symlink to a canary file outside")
def _(case):
    _replace(case.layout.evict_lock, lambda q: os.symlink(case.outside / "canary.txt", q))


@_aux("key-locks-symlink", "every key lock file (valid and hostile keys) is a symlink to a "
      "canary file outside", target="hostile", fix="quarantined")
def _(case):
    plant(case, b"NOT AN ENTRY")
    for key in (*case.valid_keys, case.key):
        _replace(case.layout.lock(key), lambda q: os.symlink(case.outside / "canary.txt", q))


@_aux("key-locks-fifo", "every key lock file (valid and hostile keys) is a FIFO, with a corrupt "
      "entry to quarantine", target="hostile", fix="quarantined")
def _(case):
    plant(case, b"NOT AN ENTRY")
    for key in (*case.valid_keys, case.key, case.fresh_key):
        _replace(case.layout.lock(key), lambda q: os.mkfifo(q, 0o600))


@_aux("key-locks-dir", "every key lock file (valid and hostile keys) is a folder, with a corrupt "
      "entry to quarantine", target="hostile", fix="quarantined")
def _(case):
    plant(case, b"NOT AN ENTRY")
    for key in (*case.valid_keys, case.key, case.fresh_key):
        _replace(case.layout.lock(key), lambda q: q.mkdir())


@_aux("evict-lock-fifo", "v1/locks/evict.lock is a FIFO")
def _(case):
    _replace(case.layout.evict_lock, lambda q: os.mkfifo(q, 0o600))


@_aux("locks-folder-symlink", "v1/locks is a symlink to a folder outside the root (with a "
      "corrupt entry to quarantine)", target="hostile", fix="quarantined")
def _(case):
    plant(case, b"NOT AN ENTRY")
    _replace(case.layout.locks, lambda q: os.symlink(case.outside / "dir", q))


@_aux("quarantine-symlink", "v1/quarantine is a symlink to a folder outside the root (with a "
      "corrupt entry to quarantine)", target="hostile", fix="left")
def _(case):
    plant(case, b"NOT AN ENTRY")
    _replace(case.layout.quarantine, lambda q: os.symlink(case.outside / "dir", q))


@_aux("quarantine-file", "v1/quarantine is a regular file (with a corrupt entry to "
      "quarantine)", target="hostile", fix="left")
def _(case):
    plant(case, b"NOT AN ENTRY")
    _replace(case.layout.quarantine, lambda q: q.write_bytes(b"not a folder\n"))


@_aux("quarantine-old-symlink", "an old quarantine-named symlink to a canary file outside")
def _(case):
    name = f"{case.key}.1000000000000000000.1.0123abcd.kce"
    q = case.layout.quarantine / name
    q.parent.mkdir(exist_ok=True)
    os.symlink(case.outside / "canary.txt", q)
    os.utime(q, (1e9, 1e9), follow_symlinks=False)


@_aux("temp-other-uid", "old files named like kcache's temp files: one owned by uid 12345, "
      "one a symlink to a canary outside", root_only=True)
def _(case):
    shard = case.layout.entries / case.valid_keys[0][:2]
    mine = shard / f".{case.valid_keys[0]}.kce.0123456789abcdef.tmp"
    mine.write_bytes(b"someone else's temp file\n")
    os.chown(mine, 12345, 12345)
    os.utime(mine, (1e9, 1e9))
    link = shard / f".{case.valid_keys[1]}.kce.fedcba9876543210.tmp"
    os.symlink(case.outside / "canary.txt", link)
    os.utime(link, (1e9, 1e9), follow_symlinks=False)


@_aux("cachedir-tag-symlink", "CACHEDIR.TAG is a symlink to a canary file outside")
def _(case):
    _replace(case.layout.tag, lambda q: os.symlink(case.outside / "canary.txt", q))


@_aux("bucket-symlink", "v1 is a symlink to a valid cache bucket outside the root", refused=True)
def _(case):
    import shutil
    shutil.copytree(case.layout.bucket, case.outside / "v1", symlinks=True)
    _replace(case.layout.bucket, lambda q: os.symlink(case.outside / "v1", q))


@_aux("bucket-file", "v1 is a regular file", refused=True)
def _(case):
    _replace(case.layout.bucket, lambda q: q.write_bytes(b"not a folder\n"))


@_aux("entries-symlink", "v1/entries is a symlink to a folder outside the root", refused=True)
def _(case):
    import shutil
    shutil.copytree(case.layout.entries, case.outside / "entries", symlinks=True)
    _replace(case.layout.entries, lambda q: os.symlink(case.outside / "entries", q))


# ---------------------------------------------------------------------------- read-only layers

def _in_layer(base: Kind) -> Kind:
    """``base`` planted in a read-only layer (``KCACHE_READONLY_DIRS``) instead of the root:
    a layer is never written, touched or quarantined, so everything in it must stay as it
    was (the harness snapshots it like the canaries)."""
    def build(case):
        base.build(case.in_layer())
    return Kind(f"layer-{base.name}", f"in a read-only layer: {base.title}", build,
                where="layer", served=base.served, mem=base.mem, root_only=base.root_only,
                warns=base.warns,
                fix="left" if base.where == "entry" and base.served is False else None)


for _name in ("fifo", "socket", "symlink-outside", "shard-symlink", "sparse-4g-bad-magic", "bad-magic",
              "other-uid", "meta-16m-empty-maps", "escape-names"):
    KINDS.append(_in_layer(next(k for k in KINDS if k.name == _name)))


def by_name(name: str) -> Kind:
    for k in KINDS:
        if k.name == name:
            return k
    raise KeyError(name)


def _check_unique() -> None:
    names = [k.name for k in KINDS]
    dup = {n for n in names if names.count(n) > 1}
    assert not dup, dup


_check_unique()
__all__ = ["KINDS", "Kind", "by_name", "ARTIFACTS", "META", "header_fields", "raw_map"]
