"""The Redis key layout. Every key is built and parsed here and nowhere else.

Layout (``T`` = escaped thread id, ``N`` = escaped checkpoint namespace, ``C`` =
checkpoint id, ``CH`` = escaped channel, ``V`` = channel version tag)::

    {prefix}:cp:{T}:N:C        string  checkpoint payload (parent id, metadata, blob refs)
    {prefix}:blob:{T}:N:CH:V   string  one channel value at one version
    {prefix}:wr:{T}:N:C        hash    pending writes of checkpoint C
    {prefix}:idx:{T}:N         zset    timeline: member C, score 0 (lexicographic = id order)
    {prefix}:keys:{T}:N        zset    the timeline's keys, score = expires-at ms (see below)
    {prefix}:ns:{T}            zset    namespaces of the thread, score = expires-at ms
    {prefix}:run:R             set     checkpoints written by run R, as "T:N:C"
    {prefix}:threads           zset    registry of threads, score = expires-at ms
    {prefix}:by:F:V            zset    metadata index (opt-in): member T, score = ms of the
                                       last put writing metadata field F with value tag V
    {prefix}:by                hash    F -> "1": the index of field F is complete

Members of the key index ``keys``: ``cC`` (checkpoint ``C``), ``wC`` (its writes hash),
``bCH:V`` (a blob; when no such key exists, the channel is absent at that version) and
``rR:C``, a run marker: checkpoint ``C`` was written by run ``R``
(escaped; empty for none), so deleting a thread finds its run sets without reading any
checkpoint. `ThreadKeys.indexed_key` turns a member into its key.

The metadata index (``index_metadata=``) names a thread in ``by:F:V`` (``F`` = escaped
field, ``V`` = `index_tag` of the value) once a put wrote that value; members of threads
since deleted or expired stay until a query meets them. `index_tag` gives values Python
holds equal (``1``, ``1.0``, ``True``) one tag, so a query finds what `list`'s filter
matches. These keys carry no hash tag: on a cluster each is in a slot of its own.

Every key of one thread carries the hash tag ``{T}``, so on a cluster a thread lives in
one slot. Components that are followed by another component are escaped (see
`escape`), so ``:`` only ever separates; the trailing component (``C`` or ``V``) is
stored raw because nothing comes after it.

The Lua scripts receive per-kind prefixes from `ThreadKeys` and append
``N .. ":" .. tail``; that concatenation is the only place outside this module that
knows the separator, and it follows the layout above.
"""

from __future__ import annotations

import functools
import math
import numbers
import re
from dataclasses import dataclass
from typing import Any

from ._errors import ArgumentTypeError, CorruptDataError

__all__ = [
    "EMPTY_THREAD_TAG",
    "KeySpace",
    "LegacyKeys",
    "blob_channel",
    "blob_suffix",
    "listed_namespace",
    "listed_thread",
    "member_text",
    "parse_run_member",
    "ThreadKeys",
    "escape",
    "escape_run",
    "index_tag",
    "unescape",
    "version_tag",
    "write_field",
]

SEP = ":"
# Characters that would make a key ambiguous (":"), move the cluster hash tag
# ("{", "}"), act as glob metacharacters in SCAN MATCH ("*?[]\\"), or start an
# escape ("%"). Control characters and space are escaped to keep keys printable.
_SPECIAL = re.compile(r"[%:{}*?\[\]\\\x00-\x20\x7f]")
_ESCAPES = {i: f"%{i:02X}" for i in range(0x80) if _SPECIAL.match(chr(i))}
# An escaped string never holds a lone "%", so it can stand for the empty thread id
# inside the hash tag, where "{}" would make Redis hash the whole key instead.
EMPTY_THREAD_TAG = "%"


def escape(value: str) -> str:
    """Escapes `value` so it holds no separator, brace, glob or control character.

    Non-ASCII text is kept as is; the result is reversible with `unescape`.
    """
    if _SPECIAL.search(value) is None:  # the common case: ids and names as they are
        return value
    return value.translate(_ESCAPES)


_ESCAPED = re.compile(r"%([0-9A-F]{2})")


def unescape(value: str) -> str:
    """Reverses `escape`; a ValueError for a '%' that starts no escape (`escape` never
    writes one)."""
    if "%" not in value:
        return value
    if "%" in _ESCAPED.sub("", value):
        raise ValueError(f"{value!r} has a '%' that starts no escape")
    return _ESCAPED.sub(lambda m: chr(int(m.group(1), 16)), value)


def version_tag(version: str | int | float) -> str:
    """Returns the key form of a channel version: distinct versions get distinct tags, and
    versions Python holds equal (``1``, ``1.0``, ``True``) the same one, as they are the
    same key of `InMemorySaver`'s dicts."""
    if not isinstance(version, (str, int, float)):
        raise TypeError(
            f"channel version {version!r} has type {type(version).__name__}; "
            "LangGraph channel versions are str, int or float"
        )
    if isinstance(version, float) and version.is_integer():
        version = int(version)
    if isinstance(version, int):
        return f"#i{int(version)}"  # int(): a bool is the int it equals
    if isinstance(version, float):
        return f"#f{version!r}"
    return f"#s{version}" if version.startswith("#") else version


def index_tag(value: object) -> str | None:
    """The tag of a metadata value in the metadata index, or None when it cannot be indexed.

    Values Python holds equal get the same tag and unequal ones different tags, as `list`'s
    filter compares them (``1 == 1.0 == True``): ``i<int>`` for a bool, an int or an
    integer-valued float, ``f<repr>`` for another float (infinities too), ``s<escaped
    text>`` for a str (a subclass by its text), ``n`` for None. NaN equals nothing, other
    types (lists, dicts, ...) equal no value of these: None for them, and for text UTF-8
    cannot encode (no key can hold it). Another number (a `Decimal`) gets the tag of the int
    or float it equals, or None when it equals neither.
    """
    if value is None:
        return "n"
    if isinstance(value, str):
        text = str.__str__(value)
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                return None
        return "s" + escape(text)
    if isinstance(value, int):
        if value.bit_length() > _INT_BITS:  # its digits are no key's (and slow to write)
            return None
        return f"i{int(value)}"  # int(): a bool is the int it equals
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if value.is_integer():
            return f"i{int(value)}"
        return f"f{float(value)!r}"
    if isinstance(value, numbers.Number):  # a Decimal, say: the float or int it equals
        number: Any = value
        try:
            near = float(number)
        except (TypeError, ValueError, OverflowError, ArithmeticError):
            return None
        if near == number:
            return index_tag(near)
        if not math.isfinite(near):  # 1E+5000: no int of it is cheap, nor any key's
            return None
        whole = int(number)
        return index_tag(whole) if whole == number else None
    return None


_INT_BITS = 13_000  # about 3,900 digits: below Python's limit on int-to-text conversions


def _thread_component(thread_id: str) -> str:
    return escape(thread_id) or EMPTY_THREAD_TAG


def escape_run(run_id: str) -> str:
    """A run id as checkpoint payloads and run-set keys hold it; the empty run id is a run
    too (`EMPTY_THREAD_TAG`), so that it differs from a checkpoint without one (``""``)."""
    return escape(run_id) or EMPTY_THREAD_TAG


@dataclass(frozen=True)
class ThreadKeys:
    """Keys of one thread. Built by `KeySpace.thread`."""

    prefix: str
    thread_id: str
    component: str  # escaped thread id, as inside the hash tag

    def _base(self, kind: str) -> str:
        return f"{self.prefix}{SEP}{kind}{SEP}{{{self.component}}}{SEP}"

    @functools.cached_property
    def cp_prefix(self) -> str:
        """Prefix of checkpoint keys; a script appends ``N:C``."""
        return self._base("cp")

    @functools.cached_property
    def blob_prefix(self) -> str:
        """Prefix of blob keys; a script appends ``N:CH:V``."""
        return self._base("blob")

    @functools.cached_property
    def wr_prefix(self) -> str:
        """Prefix of pending-writes keys; a script appends ``N:C``."""
        return self._base("wr")

    @functools.cached_property
    def idx_prefix(self) -> str:
        """Prefix of timeline keys; a script appends ``N``."""
        return self._base("idx")

    @functools.cached_property
    def keys_prefix(self) -> str:
        """Prefix of key-index keys; a script appends ``N``."""
        return self._base("keys")

    @functools.cached_property
    def ns(self) -> str:
        """The zset of this thread's namespaces."""
        return f"{self.prefix}{SEP}ns{SEP}{{{self.component}}}"

    def cp(self, ns: str, checkpoint_id: str) -> str:
        return f"{self.cp_prefix}{escape(ns)}{SEP}{checkpoint_id}"

    def wr(self, ns: str, checkpoint_id: str) -> str:
        return f"{self.wr_prefix}{escape(ns)}{SEP}{checkpoint_id}"

    def blob(self, ns: str, channel: str, version: str | int | float) -> str:
        return self.blob_at(ns, blob_suffix(channel, version))

    def blob_at(self, ns: str, suffix: str) -> str:
        """The blob key for a suffix built by `blob_suffix`."""
        return f"{self.blob_prefix}{escape(ns)}{SEP}{suffix}"

    def idx(self, ns: str) -> str:
        return f"{self.idx_prefix}{escape(ns)}"

    def keys(self, ns: str) -> str:
        return f"{self.keys_prefix}{escape(ns)}"

    def indexed_key(self, ns: str, member: str) -> str | None:
        """The key a member of ``keys(ns)`` stands for; None for a run marker."""
        kind, rest = member[:1], member[1:]
        if kind == "c":
            return self.cp(ns, rest)
        if kind == "w":
            return self.wr(ns, rest)
        if kind == "b":
            return self.blob_at(ns, rest)
        return None

    def run_member(self, ns: str, checkpoint_id: str) -> str:
        """The member naming one checkpoint inside a run set."""
        return f"{self.component}{SEP}{escape(ns)}{SEP}{checkpoint_id}"


def blob_suffix(channel: str, version: str | int | float) -> str:
    """The part of a blob key after the namespace: ``CH:V``."""
    if type(channel) is str and type(version) is str:
        return _str_blob_suffix(channel, version)
    return f"{escape(channel)}{SEP}{version_tag(version)}"


# Every put names the version of every channel, most of them unchanged since the last one.
@functools.lru_cache(maxsize=4096)
def _str_blob_suffix(channel: str, version: str) -> str:
    return f"{escape(channel)}{SEP}{version_tag(version)}"


_KNOWN_THREADS = 1024  # `KeySpace.thread` remembers at most this many threads' keys,
_KNOWN_ID_LENGTH = 256  # of ids up to this long


class KeySpace:
    """Builds and parses every key under one prefix."""

    def __init__(self, prefix: str) -> None:
        if not isinstance(prefix, str):
            raise ArgumentTypeError(
                f"prefix must be a str, got {type(prefix).__name__} {prefix!r}: pass e.g. "
                "prefix='lg'"
            )
        if not prefix:
            raise ValueError("prefix must not be empty; pass e.g. prefix='lg'")
        bad = sorted({ch for ch in prefix if ch in "{}*?[]\\" or ord(ch) <= 0x20})
        if bad:
            raise ValueError(
                f"prefix {prefix!r} contains {''.join(bad)!r}; braces would move the "
                "cluster hash tag and glob characters break SCAN patterns: use letters, "
                "digits, '-', '_', '.' and ':' (e.g. 'myapp:agent')"
            )
        if prefix.endswith(SEP):
            raise ValueError(
                f"prefix {prefix!r} ends with {SEP!r}; the separator is added for you: "
                f"pass {prefix.rstrip(SEP)!r}"
            )
        self.prefix = prefix
        # A graph makes several calls per step on one thread: its keys are built once.
        self._threads: dict[str, ThreadKeys] = {}

    @property
    def threads(self) -> str:
        """The registry of threads."""
        return f"{self.prefix}{SEP}threads"

    @property
    def index_marker(self) -> str:
        """The hash naming the metadata fields whose index is complete."""
        return f"{self.prefix}{SEP}by"

    def index(self, field: str, tag: str) -> str:
        """The zset of the threads that wrote metadata `field` with a value of tag `tag`."""
        return f"{self.index_marker}{SEP}{escape(field)}{SEP}{tag}"

    @property
    def index_pattern(self) -> str:
        """A SCAN pattern matching every metadata index zset (and maybe other keys: see
        `index_field`)."""
        return f"{self.index_marker}{SEP}*"

    def index_field(self, key: str) -> str | None:
        """The field a metadata index key built by `index` is for; None for any other key
        (a keyspace whose prefix is this one's followed by ``:by`` has keys that match
        `index_pattern` too: theirs have a ``{`` where a tag starts, or a ``:`` in what would
        be the tag, which none holds, or are no zset: a run set)."""
        head = f"{self.index_marker}{SEP}"
        if not key.startswith(head):
            return None
        field, sep, tag = key[len(head) :].partition(SEP)
        if not sep or tag[:1] not in ("i", "f", "s", "n") or SEP in tag:
            return None
        try:
            return unescape(field)
        except ValueError:
            return None

    @property
    def run_prefix(self) -> str:
        """Prefix of run sets; a script appends the escaped run id."""
        return f"{self.prefix}{SEP}run{SEP}"

    def run(self, run_id: str) -> str:
        return self.run_escaped(escape_run(run_id))

    def escaped_run_of(self, run_key: str) -> str:
        """The escaped run id at the end of a run-set key built by `run`."""
        return run_key[len(self.run_prefix) :]

    def run_escaped(self, escaped_run_id: str) -> str:
        """The run set for a run id already escaped, as checkpoint payloads store it."""
        return f"{self.run_prefix}{escaped_run_id}"

    @property
    def pattern(self) -> str:
        """A SCAN pattern matching every key of this keyspace."""
        return f"{self.prefix}{SEP}*"

    def thread(self, thread_id: str) -> ThreadKeys:
        if not isinstance(thread_id, str):
            raise TypeError(
                f"thread_id must be a str, got {type(thread_id).__name__} {thread_id!r}; "
                "convert it with str() before passing it in the config"
            )
        # Only an exact `str` is remembered (and looked up): a subclass may define its own
        # equality, and every id must get keys built from its own text. Bounded; dict
        # operations are atomic.
        if type(thread_id) is not str or len(thread_id) > _KNOWN_ID_LENGTH:
            return ThreadKeys(self.prefix, thread_id, _thread_component(thread_id))
        known = self._threads.get(thread_id)
        if known is None:
            known = ThreadKeys(self.prefix, thread_id, _thread_component(thread_id))
            if len(self._threads) >= _KNOWN_THREADS:
                self._threads.clear()
            self._threads[thread_id] = known
        return known

    @property
    def ns_affixes(self) -> tuple[str, str]:
        """What a script puts around an escaped thread id (as the registry and the metadata
        index hold it) to build that thread's namespace-zset key."""
        return f"{self.prefix}{SEP}ns{SEP}{{", "}"

    @property
    def ns_pattern(self) -> str:
        """A SCAN pattern matching every thread's namespace zset: one key per thread."""
        return f"{self.prefix}{SEP}ns{SEP}{{*}}"

    def thread_from_ns_key(self, key: str) -> ThreadKeys:
        """Rebuilds `ThreadKeys` from a thread's namespace-zset key."""
        head = f"{self.prefix}{SEP}ns{SEP}{{"
        if not (key.startswith(head) and key.endswith("}")):
            raise ValueError(f"{key!r} is not a namespace key under prefix {self.prefix!r}")
        return self.thread_from_component(key[len(head) : -1])

    def thread_from_component(self, component: str) -> ThreadKeys:
        """Rebuilds `ThreadKeys` from an escaped thread id as stored in the registry."""
        thread_id = "" if component == EMPTY_THREAD_TAG else unescape(component)
        return ThreadKeys(self.prefix, thread_id, component)


def write_field(task_id: str, idx: int) -> str:
    """The field of one pending write inside a writes hash."""
    return f"{escape(task_id)}{SEP}{idx}"


class LegacyKeys:
    """The layout of langgraph-checkpoint-plainredis 0.1.0, read only by the migration.

    0.1.0 joined raw ids with ``:``; its keys cannot be parsed, only rebuilt from the
    registry hash, whose values name the thread and namespace exactly.
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    @property
    def registry(self) -> str:
        return f"{self.prefix}{SEP}threads"

    @property
    def stash(self) -> str:
        """Where the migration parks the 0.1.0 registry while it works."""
        return f"{self.prefix}{SEP}v010{SEP}threads"

    @property
    def lock(self) -> str:
        """Held by a migration from this prefix while it runs (a second run is refused), with
        an expiry it renews, so that the lock of a killed run lapses."""
        return f"{self.prefix}{SEP}v010{SEP}lock"

    @property
    def parked_into(self) -> str:
        """Under the prefix 0.1.0 wrote (the source), while a migration from it is unfinished:
        the prefix it migrates into, whose `stash` holds this prefix's parked registry. Set
        with the parking, in one transaction, and deleted when the run completes; a run into
        another prefix is refused while it is there (it would find no registry to migrate)."""
        return f"{self.prefix}{SEP}v010{SEP}parked"

    @property
    def seq(self) -> str:
        return f"{self.prefix}{SEP}seq"

    def idx(self, thread_id: str, ns: str) -> str:
        """The timeline of (thread, namespace); the registry hash names it as its field."""
        return SEP.join((self.prefix, "idx", thread_id, ns))

    @property
    def idx_head(self) -> str:
        """What every timeline key starts with; the raw ``thread:ns`` follows it."""
        return SEP.join((self.prefix, "idx", ""))

    @staticmethod
    def timeline_prefix(key: str, thread_id: str, ns: str) -> str | None:
        """The prefix whose timeline of (`thread_id`, `ns`) `key` is; None when it is no
        prefix's (a registry field that does not end as such a timeline key)."""
        tail = SEP.join(("", "idx", thread_id, ns))
        return key[: -len(tail)] if key.endswith(tail) and len(key) > len(tail) else None

    def cp(self, thread_id: str, ns: str, checkpoint_id: str) -> str:
        return SEP.join((self.prefix, "cp", thread_id, ns, checkpoint_id))

    def wr(self, thread_id: str, ns: str, checkpoint_id: str) -> str:
        return SEP.join((self.prefix, "wr", thread_id, ns, checkpoint_id))

    def blob(self, thread_id: str, ns: str, channel: str, version: object) -> str:
        return SEP.join((self.prefix, "blob", thread_id, ns, channel, str(version)))

    @staticmethod
    def shadowed_thread(thread_id: str) -> str | None:
        """The thread whose current-layout keys (under the same prefix) the 0.1.0 keys of
        `thread_id` can be, or None when no key of the two layouts can be the same.

        0.1.0 put raw ids after ``{prefix}:{kind}:``, where the current layout puts the hash
        tag ``{T}``: an id ``{T}`` (or ``{T}:...``) whose ``T`` is an escaped thread id
        therefore has 0.1.0 keys that are keys of thread ``unescape(T)``, e.g. the timeline
        ``lg:idx:{a}:`` of 0.1.0's thread ``{a}`` is thread ``a``'s. The result is always
        shorter than `thread_id`, so a chain of such threads is finite.
        """
        if not thread_id.startswith("{"):
            return None
        end = thread_id.find("}")
        if end < 0 or thread_id[end + 1 : end + 2] not in ("", SEP):
            return None
        component = thread_id[1:end]
        try:
            shadowed = "" if component == EMPTY_THREAD_TAG else unescape(component)
        except ValueError:
            return None
        return shadowed if _thread_component(shadowed) == component else None

    @staticmethod
    def write_index(field: str) -> int | None:
        """The write index at the end of a 0.1.0 writes-hash field ``task_id:idx``; None for
        a field 0.1.0 never wrote (no ``:idx``, or one that is not a whole number)."""
        _, sep, idx = field.rpartition(SEP)
        if not sep or not re.fullmatch(r"-?[0-9]+", idx):
            return None
        return int(idx)


def blob_channel(suffix: str) -> str:
    """The channel name inside a blob suffix built by `blob_suffix`."""
    return unescape(suffix.split(SEP, 1)[0])


def _stray_member(key: str, reason: str) -> CorruptDataError:
    fix = f"Remove that member from {key!r} to clear the error; the threads are unaffected."
    return CorruptDataError(key, reason, fix=fix)


def member_text(member: bytes | str, key: str) -> str:
    """A member of the registry or of a run set (`key`) as text; one that is not UTF-8 (no
    saver writes one) is a CorruptDataError naming the key and the member."""
    if isinstance(member, str):
        return member
    try:
        return member.decode()
    except UnicodeDecodeError:
        raise _stray_member(key, f"its member {member!r} is not UTF-8") from None


def listed_thread(keyspace: KeySpace, component: str, key: str) -> ThreadKeys:
    """The thread a member of the registry or of a run set (`key`) names; one no saver
    wrote is a CorruptDataError naming the key and the member, not a ValueError."""
    try:
        return keyspace.thread_from_component(component)
    except ValueError as error:
        raise _stray_member(key, f"its member {component!r} names no thread: {error}") from None


def listed_namespace(member: bytes | str, key: str) -> str:
    """The namespace a member of a thread's namespace zset (`key`) names, unescaped; one no
    saver wrote (not UTF-8, or a '%' that starts no escape) is a CorruptDataError naming the
    key and the member, not a ValueError."""
    text = member_text(member, key)
    try:
        return unescape(text)
    except ValueError as error:
        raise _stray_member(key, f"its member {text!r} names no namespace: {error}") from None


def parse_run_member(member: str, key: str) -> tuple[str, str, str]:
    """Splits a member of run set `key` into ``(escaped thread id, escaped namespace,
    checkpoint id)``; one no saver wrote is a CorruptDataError naming the key."""
    parts = member.split(SEP, 2)
    if len(parts) != 3:
        raise _stray_member(key, f"its member {member!r} names no checkpoint")
    return parts[0], parts[1], parts[2]
