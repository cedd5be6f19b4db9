"""An S3 answer is bounded by size, not only by the call's deadline: botocore reads an answer's
body whole (an error's, a listing's XML) and s3fs a value's ranged GET whole, so a server that
ignored the Range and sent ``Content-Length: 1 TiB`` of zeros (or chunked bytes for ever) filled
the user's program's memory at the network's speed until the deadline: 2.2 GB for one lookup at
the default timeout on the 2-core machine. Each answer now counts against the call's allowance
(the value's size and 16 MiB besides, as Redis's): a bad_value, cut off at once.

The attacker is an HTTP server on 127.0.0.1 (a thread here); the lookup runs in a child process
under a memory limit, as a user's program with KCACHE_REMOTE set."""
from __future__ import annotations

import http.server

import pytest

pytest.importorskip("s3fs")
from servers import ThreadedHTTP, s3_lookup_in_child  # noqa: E402

CHILD_MEMORY = 1 << 30  # bytes (RLIMIT_DATA): the unbounded read passed it within ~1 s
TIMEOUT = 3  # KCACHE_REMOTE_TIMEOUT: a deadline of 6 s, which the flood filled before the fix
FLOOD = bytes(1 << 20)


class FloodingS3(ThreadedHTTP):
    """A fake S3 endpoint whose answer never ends. ``mode``: ``length`` (HEAD states 1000
    bytes, the ranged GET is answered 206 with ``Content-Length: 1 TiB``, the Range ignored),
    ``chunked`` (the same, chunked encoding for ever), ``listing`` (HEAD: 404, so s3fs lists
    the key's "folder", answered with a 1 TiB body), ``error`` (the GET answered 503 with a 1
    TiB body). Zeros as fast as the client takes them, until it hangs up."""

    def __init__(self, mode: str):
        owner = self
        self.gets = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:
                self.send_response(404 if mode == "listing" else 200)
                self.send_header("Content-Length", "0" if mode == "listing" else "1000")
                self.send_header("ETag", '"0123456789abcdef0123456789abcdef"')
                self.end_headers()

            def do_GET(self) -> None:
                owner.gets += 1
                self.send_response({"error": 503, "listing": 200}.get(mode, 206))
                if mode == "chunked":
                    self.send_header("Transfer-Encoding", "chunked")
                else:
                    self.send_header("Content-Length", str(1 << 40))
                self.end_headers()
                piece = (b"%x\r\n%s\r\n" % (len(FLOOD), FLOOD)) if mode == "chunked" else FLOOD
                try:
                    while True:  # until the client hangs up
                        self.wfile.write(piece)
                except OSError:
                    self.close_connection = True

        self.serve(Handler)


@pytest.mark.parametrize("mode", ["length", "chunked", "listing", "error"])
def test_an_endless_s3_answer_is_cut_off_by_size_not_read_into_memory(mode, tmp_path):
    with FloodingS3(mode) as server:
        done, out = s3_lookup_in_child(server.endpoint, tmp_path, TIMEOUT, CHILD_MEMORY)
        assert server.gets >= 1  # the attack was served
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    # a refused answer (bad_value), cut off by size long before the 6 s deadline; before the
    # fix a timeout (or a MemoryError under the limit, counted as io) after ~1 GB
    counted = (out["hit"], out["bad"], out["timeout"], out["io"])
    assert counted == (False, 1, 0, 0), (out, done.stderr)
    assert out["took"] < 2 * TIMEOUT, out
    assert out["rss"] < 400 << 20, out
    assert "sent more than the" in done.stderr and done.stderr.count("\n") <= 2, done.stderr
