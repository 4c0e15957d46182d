"""Bounded reads of project files: regular files only, never more than the limit."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from servefleet.core.errors import ConfigError
from servefleet.core.readfile import FileRefused, read_regular_file
from servefleet.core.yamlfile import MAX_BYTES, parse_yaml, read_yaml


def test_reads_a_regular_file_up_to_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_bytes(b"x" * 100)
    assert read_regular_file(path, 100) == b"x" * 100
    with pytest.raises(FileRefused, match="larger than the 0 KiB limit"):
        read_regular_file(path, 99)


def test_dev_zero_is_refused_without_reading_it(tmp_path: Path) -> None:
    link = tmp_path / "zero.yaml"
    link.symlink_to("/dev/zero")
    with pytest.raises(ConfigError, match=r"^zero.yaml: is a device, not a regular file"):
        read_yaml(link, "zero.yaml")


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    result: list[BaseException] = []

    def read() -> None:
        try:
            read_yaml(fifo, "p.yaml")
        except ConfigError as error:
            result.append(error)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(5)
    assert not reader.is_alive(), "opening a FIFO blocked"
    assert "is a FIFO, not a regular file" in str(result[0])


def test_a_growing_file_is_bounded_by_bytes_read(tmp_path: Path) -> None:
    # /proc files report size 0 and are read in full by a stat-based check.
    path = tmp_path / "big.yaml"
    path.write_bytes(b"# " + b"x" * (MAX_BYTES + 10))
    with pytest.raises(ConfigError, match="file is larger than the 256 KiB limit"):
        read_yaml(path, "big.yaml")


@pytest.mark.parametrize("number", ["9" * 5000, "-" + "9" * 5000, "0x" + "f" * 5000,
                                    "1." + "1" * 5000, "1" * 65])
def test_huge_numbers_are_one_clear_line(number: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_yaml(f"port: {number}\n", "x.yaml")
    assert str(caught.value).startswith("x.yaml: line 1 column 7: a number of ")
    assert "\n" not in str(caught.value)


def test_ordinary_numbers_still_parse() -> None:
    assert parse_yaml("a: 8000\nb: 0.95\nc: 1_000\nd: 0x10\n", "x.yaml") == {
        "a": 8000, "b": 0.95, "c": 1000, "d": 16}
