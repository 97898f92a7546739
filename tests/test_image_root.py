"""webhook/buildtime/image.py's decisions that need no build stage: what of the standard library
is trimmed, and how ldd's lines are read (the image test proves the assembled image runs)."""

from __future__ import annotations

import pytest

from webhook.buildtime import image


@pytest.mark.parametrize(
    ("path", "trimmed"),
    [
        ("/usr/lib/python3.11/test/test_ssl.py", True),
        ("/usr/lib/python3.11/tkinter/__init__.py", True),
        ("/usr/lib/python3.11/turtle.py", True),
        ("/usr/lib/python3.11/lib-dynload/_sqlite3.cpython-311-x86_64-linux-gnu.so", True),
        ("/usr/lib/python3.11/lib-dynload/_testcapi.cpython-311-x86_64-linux-gnu.so", True),
        ("/usr/lib/python3.11/lib-dynload/readline.cpython-311-x86_64-linux-gnu.so", True),
        # kept: what serving, the CLI and the kubernetes client import
        ("/usr/lib/python3.11/ssl.py", False),
        ("/usr/lib/python3.11/asyncio/base_events.py", False),
        ("/usr/lib/python3.11/testfixtures.py", False),  # a name that only starts like a trimmed one
        ("/usr/lib/python3.11/lib-dynload/_ssl.cpython-311-x86_64-linux-gnu.so", False),
        ("/usr/lib/python3.11/lib-dynload/_typing.cpython-311-x86_64-linux-gnu.so", False),
        ("/usr/lib/x86_64-linux-gnu/libssl.so.3", False),
    ],
)
def test_trimmed(path: str, trimmed: bool) -> None:
    assert image.trimmed(path) is trimmed


def test_ldd_lines() -> None:
    lines = {
        "\tlinux-vdso.so.1 (0x00007ffd1b5e9000)": None,  # in the kernel, no file
        "\tlibssl.so.3 => /lib/x86_64-linux-gnu/libssl.so.3 (0x00007f2c92000000)": "/lib/x86_64-linux-gnu/libssl.so.3",
        "\t/lib64/ld-linux-x86-64.so.2 (0x00007f2c92178000)": "/lib64/ld-linux-x86-64.so.2",
    }
    for line, want in lines.items():
        m = image.LDD_LINE.match(line)
        assert (m.group(1) if m else None) == want, line
