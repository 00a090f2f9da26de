"""Unit tests of the dataplane's pure parts: sizes, names, the command runner, open_driver
and the send-stream filter (no root needed)."""

import struct
import sys

import pytest

from dataplane import (CommandFailed, DirectoryDriver, InvalidArgument, Runner, open_driver,
                       parse_size, validate_name)
from dataplane.local.sendstream import (CMD_END, CMD_SUBVOL, HEADER_LEN, MAGIC, StreamFilter,
                                  crc32c)


def test_parse_size():
    assert parse_size("2G") == 2 << 30
    assert parse_size("512M") == 512 << 20
    assert parse_size("1.5GiB") == 3 << 29
    assert parse_size("4096") == 4096
    assert parse_size(10) == 10
    # decimal units mean what a disk's label means, binary ones what they say
    assert parse_size("5GB") == 5 * 10**9
    assert parse_size("5GiB") == parse_size("5G") == parse_size("5g") == 5 * 2**30
    assert parse_size("1.5TB") == 1_500_000_000_000
    assert parse_size("200 kB") == 200_000
    assert parse_size("123456789012345678901") == 123456789012345678901   # exact, no float
    for bad in ("", "0", "-1G", "lots", "1X", "5XB", "5Gi", "1.5.2G", "0.5", "1e3", 0, -5):
        with pytest.raises(InvalidArgument):
            parse_size(bad)


def test_validate_name():
    for good in ("a", "pool-1", "x.y_z", "0" * 63):
        assert validate_name(good) == good
    for bad in ("", "A", "_a", ".", "a/b", "a" * 64, None, 5):
        with pytest.raises(InvalidArgument):
            validate_name(bad)


def test_runner_reports_stderr_and_logs():
    log = []
    runner = Runner(log=log)
    assert runner.run([sys.executable, "-c", "print('hi')"]).stdout == "hi\n"
    with pytest.raises(CommandFailed) as exc:
        runner.run([sys.executable, "-c", "import sys; sys.exit('boom here')"])
    assert "boom here" in str(exc.value) and exc.value.returncode == 1
    assert exc.value.code == "command_failed"
    with pytest.raises(CommandFailed) as exc:
        runner.run(["/nonexistent/tool"])
    assert "not found" in str(exc.value)
    assert len(log) == 3


def test_open_driver(tmp_path):
    assert isinstance(open_driver("directory", tmp_path), DirectoryDriver)
    assert open_driver("auto", tmp_path).name in ("local", "directory")
    with pytest.raises(InvalidArgument):
        open_driver("zfs", tmp_path)


def _command(cmd: int, attrs: list) -> bytes:
    payload = b"".join(struct.pack("<HH", t, len(v)) + v for t, v in attrs)
    crc = crc32c(payload, crc32c(struct.pack("<IHI", len(payload), cmd, 0)))
    return struct.pack("<IHI", len(payload), cmd, crc) + payload


def _stream() -> bytes:
    return (MAGIC + struct.pack("<I", 1)
            + _command(CMD_SUBVOL, [(15, b"orig-name"), (1, b"u" * 16), (2, b"\0" * 8)])
            + _command(CMD_END, []))


def test_stream_filter_renames_first_subvolume_with_valid_crc():
    data = _stream()
    filt = StreamFilter("new-name")
    out = b"".join(filt.feed(data[i:i + 3]) for i in range(0, len(data), 3))
    filt.check_complete()
    length, cmd, crc = struct.unpack_from("<IHI", out, HEADER_LEN)
    payload = out[HEADER_LEN + 10: HEADER_LEN + 10 + length]
    assert cmd == CMD_SUBVOL and b"new-name" in payload and b"orig-name" not in payload
    assert crc == crc32c(payload, crc32c(struct.pack("<IHI", length, cmd, 0)))


@pytest.mark.parametrize("cut", [0, 5, HEADER_LEN, HEADER_LEN + 12, -10])
def test_stream_filter_detects_truncation(cut):
    filt = StreamFilter("n")
    filt.feed(_stream()[:cut])
    with pytest.raises(InvalidArgument):
        filt.check_complete()


def test_stream_filter_refuses_garbage():
    with pytest.raises(InvalidArgument):
        StreamFilter("n").feed(b"definitely not a btrfs stream")
