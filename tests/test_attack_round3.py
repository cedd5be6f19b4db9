"""Attack review of issue 32's fixes (round 3): defects found by attacking the merged code
with real files and processes, each pinned by a test that failed before its fix."""
from __future__ import annotations

import os

import pytest

pytest.importorskip("numba.cuda")

from kcache.dispatcher.components import LinkUnread, link_digests  # noqa: E402

#: A regular file (``stat``: S_IFREG, size 0) whose read fails: EIO at offset 0.
FAILING = "/proc/self/mem"


@pytest.mark.skipif(not os.path.exists(FAILING), reason="needs Linux /proc")
def test_a_regular_link_file_whose_read_fails_is_refused_not_raised():
    """A link= file that stat calls regular but whose read raises (EIO) made the key
    computation raise OSError into the kernel call; it is a LinkUnread (runs uncached)."""
    with pytest.raises(LinkUnread, match="cannot be read"):
        link_digests([FAILING])


@pytest.mark.skipif(not os.path.exists(FAILING), reason="needs Linux /proc")
def test_a_header_whose_read_fails_is_refused_not_raised(tmp_path):
    source = tmp_path / "k.cu"
    source.write_text(f'#include "{FAILING}"\nextern "C" __device__ int f(int x) {{ return x; }}\n')
    with pytest.raises(LinkUnread, match="cannot be read"):
        link_digests([str(source)])
