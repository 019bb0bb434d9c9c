"""The bounded YAML/JSON reader: same values as PyYAML on ordinary documents, one-line refusals on the rest."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.documents import parse_document
from flexcomm.costmodel.errors import InputError

scalars = st.one_of(st.integers(-10**6, 10**6), st.booleans(), st.none(),
                    st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1, max_size=8))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text("abcxyz", min_size=1, max_size=4),
                                                                       inner, max_size=4)), max_leaves=20)


@settings(max_examples=60, deadline=None)
@given(values, st.booleans())
def test_ordinary_documents_read_as_pyyaml_and_json_read_them(value: object, flow: bool) -> None:
    text = yaml.safe_dump(value, default_flow_style=flow)
    assert parse_document(text, "yaml", "doc.yaml", "cluster") == yaml.safe_load(text)
    assert parse_document(json.dumps(value), "json", "doc.json", "cluster") == value


def test_deep_flow_nesting_is_refused_before_the_quadratic_scanner(monkeypatch: pytest.MonkeyPatch) -> None:
    deep = "x: " + "[" * 101 + "]" * 101 + "\n"
    with pytest.raises(InputError, match="at most 100 levels of nested .*FLEXCOMM_MAX_DOCUMENT_FLOW_DEPTH"):
        parse_document(deep, "yaml", "deep.yaml", "cluster")
    assert parse_document("x: " + "[" * 100 + "]" * 100, "yaml", "ok.yaml", "cluster")["x"] is not None
    monkeypatch.setenv("FLEXCOMM_MAX_DOCUMENT_FLOW_DEPTH", "200")
    assert parse_document(deep, "yaml", "deep.yaml", "cluster")["x"] is not None  # the variable raises it


def test_alias_bomb_and_recursive_alias_are_refused_by_name() -> None:
    levels = "".join(f"{n}: &{n} [{','.join([f'*{p}'] * 9)}]\n"
                     for p, n in zip("abcdefgh", "bcdefghi", strict=True))
    bomb = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n' + levels
    with pytest.raises(InputError, match="^cluster: got 'bomb.yaml'; expected at most 200,000 YAML nodes"):
        parse_document(bomb, "yaml", "bomb.yaml", "cluster")
    with pytest.raises(InputError, match="recursive aliases"):
        parse_document("&a [*a]", "yaml", "loop.yaml", "study")
