"""A pseudo-terminal for tests that run a command as a person at a terminal would."""
import fcntl
import os
import pty
import struct
import termios


def open_terminal(columns: int, rows: int = 50) -> tuple[int, int]:
    """(master, slave) descriptors of a new pseudo-terminal ``columns`` wide."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    return master, slave


def drain(master: int) -> bytes:
    """Everything written to the terminal until the child closed it; closes ``master``."""
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO once the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return b"".join(chunks)
