"""Shard checks and format detection without a plane (no root, no database)."""
import base64
import os

import pytest

from services.checkpoints import formats, sources, verify


def test_crc32c_matches_the_reference():
    assert verify.crc32c_update(0, b"123456789") == 0xE3069283
    assert verify.crc32c_update(verify.crc32c_update(0, b"1234"), b"56789") == 0xE3069283


def test_crc32c_accepts_hex_base64_and_int():
    b64 = base64.b64encode((0xE3069283).to_bytes(4, "big")).decode()
    for value in ("e3069283", b64, 0xE3069283):
        entry = verify.validate_manifest([{"name": "a", "size": 9, "crc32c": value}])[0]
        assert entry["crc32c"] == "e3069283"


def test_check_manifest_names_every_problem(tmp_path):
    (tmp_path / "ok").write_bytes(b"123456789")
    (tmp_path / "long").write_bytes(b"xx")
    (tmp_path / "dir").mkdir()
    manifest = verify.validate_manifest([
        {"name": "ok", "size": 9, "crc32c": "e3069283"},
        {"name": "long", "size": 1},
        {"name": "gone", "size": 1},
        {"name": "dir", "size": 0},
    ])
    problems = {p.name: p.problem for p in verify.check_manifest(sources.DirectorySource(str(tmp_path)), manifest)}
    assert problems == {"long": "long", "gone": "missing", "dir": "not_a_file"}


@pytest.mark.parametrize("name,expected", [
    ("step-100", (100, False)), ("step_7", (7, False)), ("checkpoint-3", (3, False)),
    ("ckpt_12", (12, False)), ("42", (42, False)),
    ("42.orbax-checkpoint-tmp-1700000000", (42, True)),
    ("latest", None), ("step-x", None), (".snapshots", None),
])
def test_step_directory_names(name, expected):
    assert formats.step_of(name) == expected


def test_garbage_metadata_is_not_a_checkpoint(tmp_path):
    (tmp_path / ".metadata").write_bytes(os.urandom(64))
    det = formats.detect(str(tmp_path))
    assert (det.format, det.finished) == ("dcp", False) and "not readable" in det.note
