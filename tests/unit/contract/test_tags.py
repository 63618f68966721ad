"""The user's tags (`stratus.contract.tags`): AWS's rules, each refusal naming the tag and the rule, and their
`STRATUS_TAGS` form, which the control plane reads back."""

from __future__ import annotations

import pytest

from stratus.contract.errors import InvalidTagError
from stratus.contract.tags import MAX_USER_TAGS, tags_from_json, tags_to_json, user_tags


def test_good_tags_are_kept_sorted_by_key() -> None:
    tags = {
        "team": "vision",
        "cost-center": "4711",
        "Owner": "ana@example.com",
        "empty": "",
        "k" * 128: "v" * 256,
    }
    checked = user_tags(tags)
    assert checked == tags and list(checked) == sorted(tags)
    assert user_tags({"projet": "vision à deux", "名前": "値 1"})  # letters and spaces of any script


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("", "x", "tag =x: a key has 1 to 128 characters (this one 0)"),
        ("k" * 129, "x", "a key has 1 to 128 characters (this one 129)"),
        ("team", "v" * 257, "tag team=" + "v" * 257 + ": a value has at most 256 characters (this one 257)"),
        ("aws:team", "x", "tag aws:team=x: keys starting with 'aws:' are AWS's own; use another key"),
        ("AWS:team", "x", "keys starting with 'aws:' are AWS's own"),
        ("stratus:cluster-id", "x", "keys starting with 'stratus:' are Stratus's own; use another key"),
        ("Name", "x", "tag Name=x: Stratus names each pool's instances with 'Name'; use another key"),
        (
            "team#1",
            "x",
            "tag team#1=x: its key has '#'; AWS tags take letters, digits, spaces and + - = . _ : / @",
        ),
        ("team", "a,b", "tag team=a,b: its value has ','"),
        ("team", "a\tb", "its value has '\\t'"),
    ],
)
def test_a_tag_aws_or_stratus_refuses_is_named_with_the_rule(key: str, value: str, message: str) -> None:
    with pytest.raises(InvalidTagError) as caught:
        user_tags({key: value})
    assert message in str(caught.value)


def test_at_most_40_tags() -> None:
    assert len(user_tags({f"k{i:02}": "v" for i in range(MAX_USER_TAGS)})) == MAX_USER_TAGS == 40
    with pytest.raises(InvalidTagError, match=r"41 tags: at most 40 \(AWS Batch takes 50 on its instances"):
        user_tags({f"k{i:02}": "v" for i in range(41)})


def test_the_environment_form_is_compact_json_read_back_checked() -> None:
    text = tags_to_json({"team": "vision", "cost-center": "4711"})
    assert text == '{"cost-center":"4711","team":"vision"}'
    assert tags_from_json(text) == {"cost-center": "4711", "team": "vision"}
    assert tags_from_json("") == {} and tags_from_json("  ") == {}
    with pytest.raises(InvalidTagError, match="not JSON"):
        tags_from_json("team=vision")
    with pytest.raises(InvalidTagError, match="is not an object of tag keys to string values"):
        tags_from_json('{"team": 1}')
    with pytest.raises(InvalidTagError, match="keys starting with 'aws:'"):
        tags_from_json('{"aws:x": "1"}')
