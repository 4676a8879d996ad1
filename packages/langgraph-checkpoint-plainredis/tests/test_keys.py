"""The key layout: unambiguous for any strings, one hash slot per thread."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from langgraph_checkpoint_plainredis._keys import (
    _KNOWN_ID_LENGTH,
    _KNOWN_THREADS,
    EMPTY_THREAD_TAG,
    KeySpace,
    blob_channel,
    blob_suffix,
    escape,
    parse_run_member,
    unescape,
    version_tag,
)

text = st.text(max_size=40)


@given(text)
def test_escape_round_trips_and_hides_separators(value: str) -> None:
    escaped = escape(value)
    assert unescape(escaped) == value
    assert not set(escaped) & set(":{}*?[]\\ \n\t")


# Stored keys depend on exactly which characters are escaped: this set is part of the layout.
LAYOUT_ESCAPED = set("%:{}*?[]\\") | {chr(i) for i in range(0x21)} | {"\x7f"}


def test_escape_rewrites_exactly_the_layout_characters() -> None:
    for code in range(0x3_0000):
        if 0xD800 <= code <= 0xDFFF:  # lone surrogates are not text
            continue
        ch = chr(code)
        value = f"a{ch}b"
        expected = f"a%{code:02X}b" if ch in LAYOUT_ESCAPED else value
        assert escape(value) == expected, hex(code)
        assert unescape(expected) == value


@pytest.mark.parametrize("stray", ["%ZZ", "a%", "%4", "%4a", "x%%"])
def test_unescape_refuses_a_percent_escape_never_writes(stray: str) -> None:
    with pytest.raises(ValueError, match="starts no escape"):
        unescape(stray)


@given(text, text, text, text)
def test_different_thread_and_namespace_never_share_a_key(
    t1: str, n1: str, t2: str, n2: str
) -> None:
    ks = KeySpace("lg")
    a, b = ks.thread(t1), ks.thread(t2)
    if (t1, n1) == (t2, n2):
        return
    assert a.idx(n1) != b.idx(n2)
    assert a.cp(n1, "c") != b.cp(n2, "c")
    assert a.blob(n1, "messages", "1") != b.blob(n2, "messages", "1")


def test_seed_collision_case_is_separated() -> None:
    ks = KeySpace("lg")
    # 0.1.0 stored both at lg:idx:a:b:c.
    assert ks.thread("a").idx("b:c") == "lg:idx:{a}:b%3Ac"
    assert ks.thread("a:b").idx("c") == "lg:idx:{a%3Ab}:c"


@given(text, text, text)
def test_every_key_of_a_thread_has_the_same_hash_tag(thread: str, ns: str, cid: str) -> None:
    tk = KeySpace("myapp:agent").thread(thread)
    tag = "{" + (escape(thread) or EMPTY_THREAD_TAG) + "}"
    for key in (
        tk.cp(ns, cid),
        tk.wr(ns, cid),
        tk.blob(ns, "ch", 3),
        tk.idx(ns),
        tk.keys(ns),
        tk.ns,
    ):
        first = key.index("{")
        assert key[first : key.index("}", first) + 1] == tag


def test_empty_thread_id_gets_a_non_empty_hash_tag() -> None:
    # "{}" would make Redis hash the whole key and scatter the thread on a cluster.
    assert KeySpace("lg").thread("").idx("") == "lg:idx:{%}:"


@given(st.one_of(st.text(max_size=20), st.integers(), st.floats(allow_nan=False)))
def test_version_tags_are_injective_per_type(version: str | int | float) -> None:
    tag = version_tag(version)
    assert version_tag(str(version)) != tag or isinstance(version, str)
    assert blob_channel(blob_suffix("branch:to:agent", version)) == "branch:to:agent"


@pytest.mark.parametrize(("one", "other"), [(1, 1.0), (1, True), (0, False), (0, -0.0), (-3, -3.0)])
def test_versions_python_holds_equal_share_a_tag(one: int | float, other: int | float) -> None:
    """As keys of InMemorySaver's dicts: a checkpoint naming 1.0 reads the value put at 1."""
    assert version_tag(one) == version_tag(other)
    assert blob_suffix("a", one) == blob_suffix("a", other)
    assert version_tag(1.5) != version_tag(1) and version_tag(float("inf")) == "#finf"


def test_run_member_round_trip() -> None:
    tk = KeySpace("lg").thread("u:1")
    assert parse_run_member(tk.run_member("sub:2", "cid:x"), "k") == ("u%3A1", "sub%3A2", "cid:x")


@pytest.mark.parametrize(
    ("prefix", "error"),
    [
        ("", ValueError),
        ("a{b}", ValueError),
        ("lg:", ValueError),
        ("a b", ValueError),
        (3, TypeError),
    ],
)
def test_bad_prefix_is_refused_with_the_fix(prefix: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="prefix"):
        KeySpace(prefix)  # type: ignore[arg-type]


def test_thread_id_must_be_text() -> None:
    with pytest.raises(TypeError, match="str"):
        KeySpace("lg").thread(b"x")  # type: ignore[arg-type]


def test_a_threads_keys_are_built_once_and_what_is_remembered_stays_bounded() -> None:
    space = KeySpace("lg")
    first = space.thread("t-1")
    assert space.thread("t-1") is first
    assert first.cp_prefix == space.thread("t-1").cp_prefix == "lg:cp:{t-1}:"
    for i in range(_KNOWN_THREADS + 10):
        assert space.thread(f"other-{i}").thread_id == f"other-{i}"
    assert len(space._threads) <= _KNOWN_THREADS
    long_id = "x" * (_KNOWN_ID_LENGTH + 1)
    assert space.thread(long_id).component == long_id
    assert long_id not in space._threads  # a 10 KB id is built each time, never kept
    assert KeySpace("other").thread("t-1").cp_prefix == "other:cp:{t-1}:"


def test_an_id_of_a_str_subclass_gets_keys_of_its_own_text() -> None:
    """A subclass may call two different texts equal: each still gets its own keys."""

    class Folded(str):
        def __eq__(self, other: object) -> bool:
            return isinstance(other, str) and self.lower() == other.lower()

        def __hash__(self) -> int:
            return hash(self.lower())

    space = KeySpace("lg")
    assert space.thread("alice").cp_prefix == "lg:cp:{alice}:"
    assert space.thread(Folded("Alice")).cp_prefix == "lg:cp:{Alice}:"
    assert space.thread("alice").cp_prefix == "lg:cp:{alice}:"
