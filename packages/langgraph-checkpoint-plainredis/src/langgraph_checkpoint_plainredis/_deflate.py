"""zlib streams for channel values, each built on the last value of its channel. No I/O.

A chat thread's messages channel grows by a message or two per step, and every version is
stored whole. Compressing each one from scratch costs time in proportion to the thread's
length: 85 µs for 20 messages, 480 µs for 100, twice per turn. `ValueMemo` remembers, per
(thread, namespace, channel), the last value this process wrote and its compressed body; a
new value that extends it (the same msgpack array with items appended, or the same bytes
with more after them) compresses only what was added.

The result is an ordinary zlib stream, read back by `zlib.decompress` like any other:

- the zlib header;
- the value's leading array header as a stored block, when it has one (its length field is
  the one part that changes as items are appended);
- the body: raw deflate segments, each ending in a sync flush (byte-aligned). The first is
  compressed alone; each later one is compressed with up to `DICTIONARY` bytes of the body
  before it as its dictionary (never the array header), so its back-references fall inside
  the body, which every later value repeats unchanged;
- an empty final block and the Adler-32 of the whole value.

The first segment is compressed with its own Huffman codes, appended ones with the fixed
codes (unless their bytes barely compress that way): a table per segment would cost bytes
every time and make every read build it (a 34-message value in 34 such segments inflates
2.2x slower than the value compressed in one go; with fixed codes, as fast). After
`SEGMENTS` appended segments the body is compressed in one go again. On a 100-message chat
thread (two puts per turn) that stores 1.11x the bytes of compressing every version in one
go, inflates as fast, and compresses in 0.26x the time. Appends so small that their segments
cost more than that (a list of short strings, say) also make the body compressed in one go
again: once it takes more than `SLACK` times what the ratio of its last whole compression
predicts for its length, plus 64 bytes.

A read of the last value written to a channel skips decompression when the stored bytes are
the ones written. Versions of a channel read together (a page of checkpoints) inflate their
shared body once: `inflate_related`.
"""

from __future__ import annotations

import os
import threading
import weakref
import zlib
from collections.abc import Hashable, Sequence
from typing import NamedTuple

__all__ = ["COMPRESS_MIN", "ValueMemo", "array_head", "inflate_related"]

COMPRESS_MIN = 512  # values shorter than this are stored as they are
LEVEL = 1  # zlib's fastest: values are written far more often than read back
DICTIONARY = 4096  # bytes of the body before a new segment that it may refer to
# An appended segment, a few hundred bytes as a rule, is compressed by a compressor sized
# for it: a window of DICTIONARY bytes and zlib's memory level 4 take about 30 KiB, where
# zlib's defaults (32 KiB window, level 8) take 270 KiB, most of it cleared and set up anew
# per segment. On a 100-message chat thread that stores 0.4-0.9 % more bytes (about 1 % for
# base64), and back-references reach 3,834 bytes (the window less zlib's lookahead), which
# any reader resolves (the header says 32 KiB). A segment over SMALL_SEGMENT bytes (a long
# tool result) gets zlib's defaults, and repeats that far apart within it.
_SEGMENT_WBITS = -12
_SEGMENT_MEMLEVEL = 4
SMALL_SEGMENT = 4 * DICTIONARY
SLACK = 1.5  # segments may take this much more than the body compressed in one go
SEGMENTS = 32  # appended segments at most, then the body is compressed in one go again
_HEADER = b"\x78\x01"  # zlib header: deflate, 32 KiB window, fastest level
_END = b"\x03\x00"  # an empty final block (fixed Huffman codes)
_TAIL = len(_END) + 4  # what a stream holds after its body: the final block, the Adler-32
_MAX_ENTRIES = 1024
_MAX_BYTES = 32 << 20  # bytes remembered (raw plus compressed), at most
_MAX_ENTRY = _MAX_BYTES // 16  # a longer value is compressed, not remembered


def array_head(type_: str, data: bytes) -> int:
    """The length of `data`'s leading msgpack array header, or 0 when it has none."""
    if type_ != "msgpack" or not data:
        return 0
    first = data[0]
    if 0x90 <= first <= 0x9F:  # fixarray
        return 1
    if first == 0xDC and len(data) >= 3:  # array 16
        return 3
    if first == 0xDD and len(data) >= 5:  # array 32
        return 5
    return 0


def _adler32_combine(first: int, second: int, second_length: int) -> int:
    """The Adler-32 of two byte strings joined, from theirs (zlib's ``adler32_combine``)."""
    base = 65521
    rem = second_length % base
    low = first & 0xFFFF
    high = (rem * low + (first >> 16) + (second >> 16) + base - rem) % base
    low = (low + (second & 0xFFFF) + base - 1) % base
    return low | (high << 16)


def _stored(data: bytes) -> bytes:
    """`data` as one stored deflate block, not the last."""
    size = len(data)
    return b"\x00" + size.to_bytes(2, "little") + (size ^ 0xFFFF).to_bytes(2, "little") + data


def _deflate(data: bytes, start: int, strategy: int, dictionary: bytes) -> bytes:
    small = dictionary and len(data) - start <= SMALL_SEGMENT  # see _SEGMENT_WBITS
    wbits, memory = (_SEGMENT_WBITS, _SEGMENT_MEMLEVEL) if small else (-15, 8)
    deflater = zlib.compressobj(LEVEL, zlib.DEFLATED, wbits, memory, strategy, dictionary)
    return deflater.compress(memoryview(data)[start:]) + deflater.flush(zlib.Z_SYNC_FLUSH)


def _segment(data: bytes, start: int, dictionary: bytes = b"") -> bytes:
    """Raw deflate of `data[start:]`, sync-flushed.

    An appended segment (one with a dictionary) uses the fixed Huffman codes: a table of its
    own would cost bytes in every segment and time to build in every reader. Fixed codes take
    a byte or more per literal, though, so bytes that barely repeat (base64, say) get their own
    table when that saves anything: the fixed codes saved less than an eighth.
    """
    if not dictionary:
        return _deflate(data, start, zlib.Z_DEFAULT_STRATEGY, b"")
    fixed = _deflate(data, start, zlib.Z_FIXED, dictionary)
    size = len(data) - start
    if len(fixed) <= size - size // 8:
        return fixed
    return min(fixed, _deflate(data, start, zlib.Z_DEFAULT_STRATEGY, dictionary), key=len)


class _Last(NamedTuple):
    """The last value written to one channel."""

    suffix: str  # its blob key suffix (channel and version)
    type_: str
    data: bytes  # uncompressed
    head: int  # the length of its array header
    check: int  # the Adler-32 of ``data[head:]``
    ratio: float  # compressed / raw size of the body when it was last compressed in one go
    segments: int  # segments after the first
    stream: bytes  # the zlib stream stored (`data` compressed)

    def body(self) -> bytes:
        """The raw deflate segments of ``data[head:]``."""
        start = len(_HEADER) + (5 + self.head if self.head else 0)
        return self.stream[start : len(self.stream) - len(_END) - 4]


_MEMOS: weakref.WeakSet[ValueMemo] = weakref.WeakSet()


def _renew_locks() -> None:
    """In a forked child: a thread that held a memo's lock at the fork does not exist there
    (and may have left its byte count half updated)."""
    for memo in list(_MEMOS):
        memo._lock = threading.Lock()
        memo._bytes = sum(len(x.data) + len(x.stream) for x in memo._last.values())


if hasattr(os, "register_at_fork"):  # POSIX; elsewhere no process forks
    os.register_at_fork(after_in_child=_renew_locks)


class ValueMemo:
    """Compresses channel values, building on the last one written per channel, and reads
    those back without decompressing them. Safe to share between threads, and across a
    fork (the child keeps what the parent remembered, under a lock of its own).

    At most `_MAX_ENTRIES` channels and `_MAX_BYTES` bytes are remembered, the least
    recently written forgotten first.
    """

    def __init__(self) -> None:
        self._last: dict[tuple[str, str, str], _Last] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        _MEMOS.add(self)

    def __len__(self) -> int:
        return len(self._last)

    def compress(self, slot: tuple[str, str, str], suffix: str, type_: str, data: bytes) -> bytes:
        """A zlib stream of `data`, the value of channel `slot` (thread, namespace,
        channel) at blob suffix `suffix`; remembered as the channel's last value."""
        if type(data) is not bytes:  # a serializer may hand over any bytes-like object
            data = bytes(data)
        head = array_head(type_, data)
        last = self._last.get(slot)
        body = None
        if last is not None and last.type_ == type_:
            seen = len(last.data) - last.head
            end = head + seen
            if seen > 0 and data.startswith(memoryview(last.data)[last.head :], head):
                body, check, ratio = last.body(), last.check, last.ratio
                segments = last.segments
                if end == len(data):
                    pass  # the same value again: the same body
                elif segments >= SEGMENTS:
                    body = None
                else:
                    segments += 1
                    body += _segment(data, end, data[max(head, end - DICTIONARY) : end])
                    check = zlib.adler32(memoryview(data)[end:], check)
                    # Each segment costs a few bytes of its own: many small appends would
                    # outgrow compressing the whole body again, which resets the count.
                    if len(body) > SLACK * ratio * (len(data) - head) + 64:
                        body = None
        if body is None:
            body = _segment(data, head)
            check = zlib.adler32(memoryview(data)[head:])
            ratio = min(len(body) / max(len(data) - head, 1), 1.0)
            segments = 0
        whole = _adler32_combine(zlib.adler32(data[:head]), check, len(data) - head)
        stream = b"".join(
            (
                _HEADER,
                _stored(data[:head]) if head else b"",
                body,
                _END,
                whole.to_bytes(4, "big"),
            )
        )
        self._remember(slot, _Last(suffix, type_, data, head, check, ratio, segments, stream))
        return stream

    def decompressed(self, slot: tuple[str, str, str], suffix: str, stream: bytes) -> bytes | None:
        """The value of channel `slot` at `suffix` when `stream` is exactly what this memo
        last compressed for it, else None (decompress it then)."""
        last = self._last.get(slot)
        if last is not None and last.suffix == suffix and last.stream == stream:
            return last.data
        return None

    def _remember(self, slot: tuple[str, str, str], last: _Last) -> None:
        size = len(last.data) + len(last.stream)
        with self._lock:
            old = self._last.pop(slot, None)
            if old is not None:
                self._bytes -= len(old.data) + len(old.stream)
            if size > _MAX_ENTRY:
                return
            self._last[slot] = last
            self._bytes += size
            while len(self._last) > _MAX_ENTRIES or self._bytes > _MAX_BYTES:
                oldest = self._last.pop(next(iter(self._last)))
                self._bytes -= len(oldest.data) + len(oldest.stream)


def _split(stream: bytes) -> tuple[bytes, int] | None:
    """The leading stored block of a stream with our header (the array header, as a rule)
    and where the raw deflate data after it starts; None for any other header."""
    if not stream.startswith(_HEADER):
        return None
    if len(stream) >= 7 and stream[2] == 0:  # a stored block that is not the last
        size = int.from_bytes(stream[3:5], "little")
        if int.from_bytes(stream[5:7], "little") != size ^ 0xFFFF or 7 + size > len(stream):
            return None
        return stream[7 : 7 + size], 7 + size
    return b"", len(_HEADER)


class _Resume(NamedTuple):
    """Where inflating a stream's body left off: how many raw deflate bytes were fed, the
    inflater after them (the next stream's own), what they inflated to and its Adler-32."""

    fed: int
    inflater: zlib._Decompress
    out: bytes
    check: int


def inflate_related(
    streams: Sequence[bytes], groups: Sequence[Hashable] | None = None
) -> list[bytes | None]:
    """Each zlib stream inflated, as `zlib.decompress` would, or None where the caller
    should inflate it alone: one that shares nothing here, one not of our layout, a damaged
    one (the caller reports the damage, for the stream it belongs to).

    Versions of one channel stored from one memo share their body: a later version's raw
    deflate data after its array header starts with all of an earlier one's body. Taken
    group by group (`groups[i]` is the channel of `streams[i]`, say; one group if None),
    shortest first, each stream whose data starts with the body fed just before resumes
    from a copy of that inflater, so bytes they share inflate once (a page of ten versions of
    a 100-message chat inflates about a tenth of the bytes it holds). That is exact for any
    bytes: the same bytes leave an inflater in the same state. The deflate data after the
    leading stored block inflates with no window before it, so a back-reference into that
    block fails here (None) rather than reading other bytes, and each result must match
    its stream's Adler-32, as zlib checks it.
    """
    results: list[bytes | None] = [None] * len(streams)
    numbers: dict[Hashable, int] = {}
    order: list[tuple[int, int, int, bytes, int]] = []
    for i, stream in enumerate(streams):
        split = _split(stream)
        if split is not None:
            group = numbers.setdefault(groups[i], len(numbers)) if groups else 0
            order.append((group, len(stream) - split[1], i, *split))
    order.sort(key=lambda item: item[:2])
    before: _Resume | None = None  # set only for the stream right after, which it feeds
    for n, (group, _, i, head, start) in enumerate(order):
        stream = streams[i]
        stop = max(len(stream) - _TAIL, start)  # where its body ends, if it is ours
        body = memoryview(stream)[start:stop]
        after = order[n + 1] if n + 1 < len(order) else None
        feeds = (
            after is not None and after[0] == group and streams[after[2]].startswith(body, after[4])
        )
        if before is None and not feeds:
            continue  # shares nothing: zlib.decompress alone is faster
        try:
            if before is not None:
                inflater, out, check = before.inflater, before.out, before.check
                more = inflater.decompress(body[before.fed :])
            else:
                inflater, out, check = zlib.decompressobj(-15), b"", 1
                more = inflater.decompress(body)
            out += more
            check = zlib.adler32(more, check)
            before = _Resume(len(body), inflater.copy(), out, check) if feeds else None
            last = inflater.decompress(stream[stop:])
        except zlib.error:
            before = None
            continue
        trailer = inflater.unused_data[:4]
        if not inflater.eof or len(trailer) < 4:
            continue
        size = len(out) + len(last)
        whole = _adler32_combine(zlib.adler32(head), zlib.adler32(last, check), size)
        if whole == int.from_bytes(trailer, "big"):
            results[i] = head + out + last
    return results
