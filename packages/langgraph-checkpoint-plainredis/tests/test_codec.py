"""Stored byte formats: round trips, and only CorruptDataError escapes a decoder."""

from __future__ import annotations

import random
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from langgraph_checkpoint_plainredis import CorruptDataError
from langgraph_checkpoint_plainredis._codec import (
    decode_blob,
    decode_blobs,
    decode_checkpoint,
    decode_write,
    encode_blob,
    encode_checkpoint,
    encode_write,
    split_netstrings,
)

typed = st.tuples(st.sampled_from(["msgpack", "json", "empty", "null", "custom/type"]), st.binary())


@given(
    st.one_of(st.none(), st.text(min_size=1)),
    st.text(),
    st.lists(st.text(), max_size=5),
    typed,
    typed,
)
def test_checkpoint_round_trip(parent, run, refs, checkpoint, metadata) -> None:  # type: ignore[no-untyped-def]
    data = encode_checkpoint(parent, run, refs, checkpoint, metadata)
    stored = decode_checkpoint(data, "k")
    assert stored == (parent, run, refs, checkpoint, metadata)


@given(typed, st.booleans())
def test_blob_round_trip(value: tuple[str, bytes], compress: bool) -> None:
    stream = zlib.compress(value[1], 1) if compress else None
    assert decode_blob(encode_blob(value, stream), "k") == value


def test_large_blobs_are_compressed_only_when_it_pays() -> None:
    text = (b"content additional_kwargs response_metadata " * 40, random.Random(0).randbytes(900))
    squeezed = encode_blob(("msgpack", text[0]), zlib.compress(text[0], 1))
    assert len(squeezed) < len(text[0]) // 4
    assert len(encode_blob(("msgpack", text[1]), zlib.compress(text[1], 1))) == len(text[1]) + 2
    with pytest.raises(CorruptDataError, match="compressed"):
        decode_blob(squeezed[:-5], "k")


@given(st.text(), st.integers(-4, 1000), st.text(), st.text(), typed)
def test_write_round_trip(task_id, idx, task_path, channel, value) -> None:  # type: ignore[no-untyped-def]
    data = encode_write(task_id, idx, task_path, channel, value)
    assert decode_write(data, "k") == (task_id, idx, task_path, channel, value)


@given(st.binary(max_size=200))
def test_decoders_raise_only_corrupt_data_error(data: bytes) -> None:
    for decode in (decode_checkpoint, decode_blob, decode_write):
        try:
            decode(data, "lg:cp:{t}::x")
        except CorruptDataError as exc:
            assert exc.key == "lg:cp:{t}::x"
            assert "lg:cp:{t}::x" in str(exc)


@given(st.lists(st.binary(max_size=200), max_size=4))
def test_blobs_decoded_together_never_raise(blobs: list[bytes]) -> None:
    """A damaged blob decodes to None (its reader decodes it again, and reports it)."""
    got = decode_blobs([(data, f"k{i}", None, "g") for i, data in enumerate(blobs)])
    for data, value in zip(blobs, got, strict=True):
        if value is not None:
            assert value == decode_blob(data, "k")


@given(typed, st.integers(min_value=1, max_value=40))
def test_truncated_values_are_reported(value: tuple[str, bytes], cut: int) -> None:
    data = encode_checkpoint("p", "r", ["a:b"], value, value)
    with pytest.raises(CorruptDataError):
        decode_checkpoint(data[: max(0, len(data) - cut)], "key")


def test_json_base64_payload_of_010_is_not_mistaken_for_ours() -> None:
    with pytest.raises(CorruptDataError, match="version-1"):
        decode_checkpoint(b'{"t": "msgpack", "d": "g6pj"}', "lg:cp:t::1")


def test_netstrings_split() -> None:
    assert split_netstrings(b"1:a,0:,3:b:c,") == [b"a", b"", b"b:c"]


def test_an_error_reply_is_read_after_the_pipeline_note_that_quotes_the_script() -> None:
    """redis-py 5 notes which command of a pipeline failed by quoting it whole: a script sent
    as EVAL quotes its source, whose own error codes came first and named the wrong key."""
    from redis.exceptions import ResponseError

    from langgraph_checkpoint_plainredis import WrongTypeError
    from langgraph_checkpoint_plainredis._core import translate_error

    note = (
        "Command # 2 (EVAL local function w(key) return redis.error_reply("
        "'PLAINREDIS_WRONGTYPE ' .. found .. ' ' .. key) end 1 lg:ns:{t}) of pipeline caused "
        "error: PLAINREDIS_WRONGTYPE list zset lg:idx:{t}:"
    )
    for message in (note, "PLAINREDIS_WRONGTYPE list zset lg:idx:{t}:"):
        error = translate_error(ResponseError(message), "lg")
        assert isinstance(error, WrongTypeError) and error.key == "lg:idx:{t}:"


def test_a_moved_reply_after_redis_py_5s_pipeline_note_says_pass_cluster_true() -> None:
    """redis-py before 6 raises a cluster node's MOVED reply to a pipeline as a plain
    ResponseError after its note on which command failed (its asyncio client quotes the
    reply as a tuple): the saver passed it on raw instead of saying to pass cluster=True."""
    from redis.exceptions import ResponseError

    from langgraph_checkpoint_plainredis import PlainRedisError
    from langgraph_checkpoint_plainredis._core import translate_error

    moved = "MOVED 14890 127.0.0.1:7002"
    note = "Command # 1 (EXISTS x:v010:threads) of pipeline caused error: "
    for message in (moved, note + moved, f"('{moved}',)", note + f"('{moved}',)"):
        error = translate_error(ResponseError(message), "lg")
        assert isinstance(error, PlainRedisError) and "pass cluster=True" in str(error)
    assert translate_error(ResponseError(note + "ERR something else"), "lg") is None
