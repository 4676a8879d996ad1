"""Byte formats of stored values. Pure functions; no I/O.

Values are raw bytes framed with netstrings (``<len>:<bytes>,``), which the Lua
scripts can also read. Format version 1:

- checkpoint: ``\\x01`` parent run refs ctype checkpoint mtype metadata
  (each a netstring; ``run`` is the escaped run id, ``refs`` the netstring-joined blob
  suffixes the checkpoint reads, so scripts can find them without decoding msgpack)
- blob: ``\\x01`` + one type-code byte + data, or ``\\x02`` + netstring(type) + data;
  the first byte gains ``0x10`` when data is zlib-compressed
- write: ``\\x01`` task_id idx task_path channel type data (each a netstring)
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Hashable, Sequence
from typing import NamedTuple

from ._deflate import inflate_related
from ._errors import CorruptDataError

__all__ = [
    "StoredCheckpoint",
    "StoredWrite",
    "decode_blob",
    "decode_blobs",
    "decode_checkpoint",
    "decode_write",
    "encode_blob",
    "encode_checkpoint",
    "encode_write",
    "join_netstrings",
    "split_netstrings",
]

V1 = b"\x01"
V1_NAMED_TYPE = b"\x02"
_ZLIB = 0x10  # flag on the first byte of a blob: the data is zlib-compressed
# One-byte codes for the types LangGraph's serializers emit; anything else is spelled out.
_TYPE_CODES = {
    "msgpack": b"m",
    "empty": b"e",
    "json": b"j",
    "bytes": b"b",
    "bytearray": b"y",
    "null": b"n",
    "pickle": b"p",
}
_CODE_TYPES = {code[0]: name for name, code in _TYPE_CODES.items()}


def _netstring(data: bytes) -> bytes:
    return b"%d:%s," % (len(data), data)


def join_netstrings(parts: Sequence[bytes]) -> bytes:
    """Concatenates `parts` as netstrings."""
    return b"".join([b"%d:%s," % (len(p), p) for p in parts])


def _read(data: bytes, pos: int, key: str) -> tuple[bytes, int]:
    colon = data.find(b":", pos, pos + 21)
    if colon < 0:
        raise CorruptDataError(key, f"no length at byte {pos}")
    try:
        size = int(data[pos:colon])
    except ValueError:
        raise CorruptDataError(key, f"bad length {data[pos:colon]!r} at byte {pos}") from None
    end = colon + 1 + size
    if size < 0 or end >= len(data) or data[end] != 0x2C:  # ","
        raise CorruptDataError(key, f"field at byte {pos} is truncated")
    return data[colon + 1 : end], end + 1


def split_netstrings(data: bytes, key: str = "<value>") -> list[bytes]:
    """Splits a concatenation of netstrings."""
    out: list[bytes] = []
    pos = 0
    while pos < len(data):
        part, pos = _read(data, pos, key)
        out.append(part)
    return out


def _fields(data: bytes, count: int, key: str, kind: str) -> list[bytes]:
    if not data or data[:1] != V1:
        raise CorruptDataError(key, f"not a version-1 {kind} (first byte {data[:1]!r})")
    fields: list[bytes] = []
    pos = 1
    for _ in range(count):
        part, pos = _read(data, pos, key)
        fields.append(part)
    if pos != len(data):
        raise CorruptDataError(key, f"{len(data) - pos} trailing bytes after the {kind}")
    return fields


class StoredCheckpoint(NamedTuple):
    """A decoded checkpoint value: serde payloads are still bytes."""

    parent_id: str | None
    run: str
    refs: list[str]
    checkpoint: tuple[str, bytes]
    metadata: tuple[str, bytes]


def encode_checkpoint(
    parent_id: str | None,
    run: str,
    refs: Sequence[str],
    checkpoint: tuple[str, bytes],
    metadata: tuple[str, bytes],
) -> bytes:
    """Encodes a checkpoint value. `run` is the escaped run id, or ``""``."""
    parent, run_b = (parent_id or "").encode(), run.encode()
    refs_b = join_netstrings([r.encode() for r in refs])
    ctype, mtype = checkpoint[0].encode(), metadata[0].encode()
    cdata, mdata = checkpoint[1], metadata[1]
    return b"\x01%d:%s,%d:%s,%d:%s,%d:%s,%d:%s,%d:%s,%d:%s," % (
        len(parent), parent, len(run_b), run_b, len(refs_b), refs_b,
        len(ctype), ctype, len(cdata), cdata, len(mtype), mtype, len(mdata), mdata,
    )  # fmt: skip


def decode_checkpoint(data: bytes, key: str) -> StoredCheckpoint:
    """Decodes a checkpoint value read from `key`."""
    parent, run, refs, ctype, cbytes, mtype, mbytes = _fields(data, 7, key, "checkpoint")
    try:
        return StoredCheckpoint(
            parent.decode() or None,
            run.decode(),
            [r.decode() for r in split_netstrings(refs, key)],
            (ctype.decode(), cbytes),
            (mtype.decode(), mbytes),
        )
    except UnicodeDecodeError as exc:
        raise CorruptDataError(key, f"invalid UTF-8: {exc}") from None


def encode_blob(typed: tuple[str, bytes], stream: bytes | None = None) -> bytes:
    """Encodes one channel value as returned by ``serde.dumps_typed``.

    `stream` is the value zlib-compressed (see `_deflate`), stored instead when that
    saves an eighth or more.
    """
    data = typed[1]
    flag = 0
    if stream is not None and len(stream) <= len(data) - len(data) // 8:
        data, flag = stream, _ZLIB
    code = _TYPE_CODES.get(typed[0])
    if code is not None:
        return bytes((V1[0] | flag,)) + code + data
    return bytes((V1_NAMED_TYPE[0] | flag,)) + _netstring(typed[0].encode()) + data


def _blob_parts(data: bytes, key: str) -> tuple[str, int, bytes]:
    """A blob value's type, its first byte and its data (still compressed when flagged)."""
    head = data[0] if data else -1
    if head & ~_ZLIB == V1[0] and len(data) >= 2:
        name = _CODE_TYPES.get(data[1])
        if name is None:
            raise CorruptDataError(key, f"unknown type code {data[1:2]!r}")
        return name, head, data[2:]
    if head & ~_ZLIB == V1_NAMED_TYPE[0]:
        type_, pos = _read(data, 1, key)
        try:
            return type_.decode(), head, data[pos:]
        except UnicodeDecodeError:
            raise CorruptDataError(key, "type name is not UTF-8") from None
    raise CorruptDataError(key, f"not a version-1 blob (first bytes {data[:2]!r})")


Known = Callable[[bytes], "bytes | None"]


def decode_blob(data: bytes, key: str, known: Known | None = None) -> tuple[str, bytes]:
    """Decodes a blob value read from `key` into ``(type, bytes)``.

    `known` may give the bytes of a compressed value without inflating it (or None).
    """
    name, head, body = _blob_parts(data, key)
    return name, _inflate(body, head, key, known)


def decode_blobs(
    blobs: Sequence[tuple[bytes, str, Known | None, Hashable]],
) -> list[tuple[str, bytes] | None]:
    """What `decode_blob` gives for each ``(data, key, known, group)``, the versions of a
    channel (a group) inflated together (`inflate_related`); None for a damaged blob: the
    caller decodes it again when it needs it, so the damage is reported for the checkpoint
    that reads it."""
    typed: list[tuple[str, bytes] | None] = [None] * len(blobs)
    pending: list[tuple[int, str, bytes]] = []
    for i, (data, key, known, _) in enumerate(blobs):
        try:
            name, head, body = _blob_parts(data, key)
        except CorruptDataError:
            continue
        if not head & _ZLIB:
            typed[i] = name, body
        elif known is not None and (value := known(body)) is not None:
            typed[i] = name, value
        else:
            pending.append((i, name, body))
    related = inflate_related([p[2] for p in pending], [blobs[p[0]][3] for p in pending])
    for (i, name, body), value in zip(pending, related, strict=True):
        if value is None:
            try:
                value = zlib.decompress(body)
            except zlib.error:
                continue
        typed[i] = name, value
    return typed


def _inflate(data: bytes, head: int, key: str, known: Known | None) -> bytes:
    if not head & _ZLIB:
        return data
    if known is not None and (value := known(data)) is not None:
        return value
    try:
        return zlib.decompress(data)
    except zlib.error as exc:
        raise CorruptDataError(key, f"compressed value is damaged: {exc}") from None


class StoredWrite(NamedTuple):
    """A decoded pending write."""

    task_id: str
    idx: int
    task_path: str
    channel: str
    value: tuple[str, bytes]


def encode_write(
    task_id: str, idx: int, task_path: str, channel: str, typed: tuple[str, bytes]
) -> bytes:
    """Encodes one pending write."""
    task, index, path = task_id.encode(), b"%d" % idx, task_path.encode()
    chan, type_, data = channel.encode(), typed[0].encode(), typed[1]
    return b"\x01%d:%s,%d:%s,%d:%s,%d:%s,%d:%s,%d:%s," % (
        len(task), task, len(index), index, len(path), path,
        len(chan), chan, len(type_), type_, len(data), data,
    )  # fmt: skip


def decode_write(data: bytes, key: str) -> StoredWrite:
    """Decodes one pending write read from the hash at `key`."""
    task_id, idx, task_path, channel, type_, value = _fields(data, 6, key, "write")
    try:
        return StoredWrite(
            task_id.decode(), int(idx), task_path.decode(), channel.decode(),
            (type_.decode(), value),
        )  # fmt: skip
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptDataError(key, f"bad write field: {exc}") from None
