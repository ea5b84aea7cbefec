"""The one error of a file that cannot be read, and the checks every file reader makes first.

:class:`DataFileError` is what :mod:`dpnets.datasets` (plain array files, bias files) and
:mod:`dpnets.md_files` (molecular-dynamics files) raise for any problem with a user's file:
its message is one line that starts with the file's name. :func:`check_regular` refuses a
FIFO, device or socket before anything opens it; :func:`reason` shortens a library's
exception to the one-line cause quoted in that message.
"""

from __future__ import annotations

import os
import stat

__all__ = ["DataFileError", "check_regular", "extension", "one_line", "reason"]


class DataFileError(ValueError):
    """A data file cannot be read as trajectories; the message is one line naming the file."""

    def __init__(self, source: str | os.PathLike, problem: str) -> None:
        self.source = str(source)
        self.problem = one_line(problem)
        super().__init__(f"{one_line(self.source)}: {self.problem}")


def extension(path: str) -> str:
    """The file's extension, lower case (``".xtc"``; ``""`` when it has none)."""
    return os.path.splitext(path)[1].lower()


def check_regular(path: str, what: str = "file") -> None:
    """Refuse a FIFO, device or socket before anything opens it (a FIFO blocks a reader)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise DataFileError(path, f"cannot read: {reason(exc)}") from exc
    if stat.S_ISREG(mode):
        return
    from dpnets.io import file_kind

    raise DataFileError(path, f"the {what} is {file_kind(mode)}; only regular files are read")


def one_line(text: str) -> str:
    """``text`` with every run of white space (newlines too) made one space."""
    return " ".join(str(text).split())


def reason(exc: BaseException) -> str:
    """A short one-line description of a library exception."""
    text = one_line(str(exc)) or type(exc).__name__
    if len(text) > 200:
        text = text[:197] + "..."
    return text
