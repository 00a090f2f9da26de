"""Checks and rewrites btrfs send streams on their way into ``btrfs receive``.

``btrfs receive`` accepts a stream cut at a command boundary as if it were whole, and it
names the new subvolume after the sender's snapshot. :class:`StreamFilter` fixes both: it
parses the framing (header, then commands of ``le32 len, le16 cmd, le32 crc, payload``),
renames the subvolume in the first command to a name of our choosing (recomputing its
CRC32C), and tells whether the stream ended with the END command.
"""

import struct

import crc32c as _crc32c

from ..errors import InvalidArgument

MAGIC = b"btrfs-stream\x00"
HEADER_LEN = len(MAGIC) + 4
CMD_HEADER_LEN = 10
CMD_SUBVOL = 1
CMD_SNAPSHOT = 2
CMD_END = 21
ATTR_PATH = 15
MAX_COMMAND = 1 << 26  # far above any real command (v2 encoded writes are <= 128 KiB + header)


def crc32c(data: bytes, crc: int = 0) -> int:
    """Raw CRC32C (seed 0, no final xor) as btrfs send uses it; the ``crc32c`` package
    computes the standard one (inverted seed and result)."""
    return _crc32c.crc32c(data, crc ^ 0xFFFFFFFF) ^ 0xFFFFFFFF


def _rename_command(cmd: int, payload: bytes, new_name: str) -> bytes:
    """Rebuild a SUBVOL/SNAPSHOT command with its PATH attribute set to ``new_name``."""
    out = bytearray()
    pos = 0
    renamed = False
    while pos + 4 <= len(payload):
        atype, alen = struct.unpack_from("<HH", payload, pos)
        value = payload[pos + 4: pos + 4 + alen]
        if atype == ATTR_PATH and not renamed:
            value = new_name.encode()
            renamed = True
        out += struct.pack("<HH", atype, len(value)) + value
        pos += 4 + alen
    if not renamed:
        raise InvalidArgument("the send stream's first command names no subvolume")
    header = struct.pack("<IHI", len(out), cmd, 0)
    crc = crc32c(bytes(out), crc32c(header))
    return struct.pack("<IHI", len(out), cmd, crc) + bytes(out)


class StreamFilter:
    """Feed chunks of a send stream; get back the bytes to pass to ``btrfs receive``."""

    def __init__(self, new_name: str):
        self.new_name = new_name
        self.buf = bytearray()
        self.header_seen = False
        self.commands = 0
        self.last_cmd = None
        self.first_cmd = None
        self.total = 0

    def feed(self, chunk: bytes) -> bytes:
        """Consume ``chunk``; return what may be forwarded now."""
        self.total += len(chunk)
        self.buf += chunk
        out = bytearray()
        while True:
            if not self.header_seen:
                if len(self.buf) < HEADER_LEN:
                    break
                if bytes(self.buf[: len(MAGIC)]) != MAGIC:
                    raise InvalidArgument("not a btrfs send stream (bad magic): send it with "
                                          "send_snapshot of a local driver")
                out += self.buf[:HEADER_LEN]
                del self.buf[:HEADER_LEN]
                self.header_seen = True
                continue
            if len(self.buf) < CMD_HEADER_LEN:
                break
            length, cmd, _crc = struct.unpack_from("<IHI", self.buf, 0)
            if length > MAX_COMMAND:
                raise InvalidArgument(f"corrupt send stream: command of {length} bytes")
            if len(self.buf) < CMD_HEADER_LEN + length:
                break
            whole = bytes(self.buf[: CMD_HEADER_LEN + length])
            del self.buf[: CMD_HEADER_LEN + length]
            if self.commands == 0:
                if cmd not in (CMD_SUBVOL, CMD_SNAPSHOT):
                    raise InvalidArgument("corrupt send stream: it does not start with a "
                                          "subvolume or snapshot command")
                self.first_cmd = cmd
                whole = _rename_command(cmd, whole[CMD_HEADER_LEN:], self.new_name)
            self.commands += 1
            self.last_cmd = cmd
            out += whole
            if cmd == CMD_END and self.buf:
                raise InvalidArgument("send stream has bytes after its end command")
        return bytes(out)

    def check_complete(self) -> None:
        """Raise InvalidArgument unless the whole stream, ending in END, has been fed."""
        if not self.header_seen:
            raise InvalidArgument(f"send stream is empty or truncated ({self.total} bytes)")
        if self.buf or self.last_cmd != CMD_END:
            raise InvalidArgument(
                f"send stream is truncated after {self.total} bytes ({self.commands} "
                "commands, no end command): nothing was received; send it again")

    @property
    def incremental(self) -> bool:
        """Whether the stream is incremental (starts with a SNAPSHOT command)."""
        return self.first_cmd == CMD_SNAPSHOT
