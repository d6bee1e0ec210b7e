"""A cell's output teed at the file descriptors (pats.sweep.logs.tee_output), seen from outside the
process: each line reaches the terminal after the cell's prefix (none by default) and the log as
printed, lines a carriage return ends (progress bars) are passed on without waiting for a newline,
and after the block stdout and stderr go where they went before. From the mutation run of logs.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from pats.sweep.logs import tee_output

    with tee_output(Path(sys.argv[1]), *sys.argv[2:]):
        os.write(1, b"one\\ntwo\\n")
        print("three")
        time.sleep(1)  # stdout and stderr have a pump each: lines written moments apart may swap
        os.write(2, b"bar 1/2\\r")
        time.sleep(1)
        os.write(1, b"four\\n")
        time.sleep(1)
        os.write(2, b"bar 2/2\\n")
    print("after out")
    print("after err", file=sys.stderr)
    """
)


def teed(tmp_path, *prefix: str) -> tuple[str, str, str]:
    log = tmp_path / "log.txt"
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(log), *prefix], capture_output=True, timeout=60,
                          check=True)  # fmt: skip
    return done.stdout.decode(), done.stderr.decode(), log.read_bytes().decode()  # bytes: '\r' kept


def test_each_line_after_the_prefix_on_the_terminal_as_printed_in_the_log(tmp_path):
    out, err, log = teed(tmp_path, "[cell] ")
    assert out == "[cell] one\n[cell] two\n[cell] three\n[cell] four\nafter out\n"
    assert err == "[cell] bar 1/2\r[cell] bar 2/2\nafter err\n"
    assert log == "one\ntwo\nthree\nbar 1/2\rfour\nbar 2/2\n"  # the progress line before 'four'


def test_no_prefix_by_default(tmp_path):
    out, err, log = teed(tmp_path)
    assert out == "one\ntwo\nthree\nfour\nafter out\n" and err == "bar 1/2\rbar 2/2\nafter err\n"


def test_python_text_reaches_the_descriptor_at_once_in_order_with_other_writers(tmp_path):
    """A write without its newline is not held back in Python: a child's (or C library's) line written
    after it follows it in the log."""
    script = textwrap.dedent(
        """
        import os, sys
        from pathlib import Path
        from pats.sweep.logs import tee_output

        with tee_output(Path(sys.argv[1])):
            sys.stdout.write("partial, ")
            os.write(1, b"then a descriptor's line\\n")
        """
    )
    log = tmp_path / "log.txt"
    subprocess.run([sys.executable, "-c", script, str(log)], capture_output=True, timeout=60, check=True)
    assert log.read_text() == "partial, then a descriptor's line\n"
