"""Option values keyed by log file: ``FILE=VALUE``, or ``VALUE`` alone for every file (``*``)."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from pathlib import PurePath
from typing import TypeVar

from meshtune.errors import LogFormatError

T = TypeVar("T")

WILDCARD = "*"


def key_matches_file(key: str, path: str) -> bool:
    """Whether an option key (``run1.log=...``) names the log file ``path``.

    A key names a file by the path as given, by an equivalent path, or by its base name.
    """
    if key in (path, PurePath(path).name):
        return True
    return os.path.normpath(key) == os.path.normpath(path)


def file_value(mapping: Mapping[str, T], path: str) -> T | None:
    """The value of the first key of ``mapping`` that names the file ``path`` (not ``"*"``)."""
    return next(
        (v for k, v in mapping.items() if k != WILDCARD and key_matches_file(k, path)), None
    )


def check_keys(
    option: str, mapping: Mapping[str, T], paths: Sequence[str], extra: Collection[str] = ()
) -> None:
    """Every key of ``mapping`` must be ``"*"``, one of ``extra`` or name one of ``paths``."""
    for key in mapping:
        if key == WILDCARD or key in extra:
            continue
        if not any(key_matches_file(key, p) for p in paths):
            also = f" nor one of {', '.join(sorted(extra))}" if extra else ""
            raise LogFormatError(f"{option}: '{key}' names none of the log files{also}")
