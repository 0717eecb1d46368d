"""Rules: matching, precedence, defaults, the bounded lookup cache, file errors."""

from __future__ import annotations

import base64
import fnmatch
import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hotkeyd.detector.glob import Glob, GlobError
from hotkeyd.detector.rules import DEFAULT_THRESHOLD, Rule, RuleSet, load_rules, parse_rules
from hotkeyd.errors import ConfigError, RulesError

GOOD = """\
# a comment
[default]
threshold = 200
ttl = 4
cooldown = 1.5

[[rule]]
name = "health"
exact = "healthcheck"
ignore = true

[[rule]]
name = "carts"
prefix = "cart:"
threshold = 50
ttl = 2

[[rule]]
name = "profiles"
glob = "user:*:profile"
threshold = 10.5

[[rule]]
name = "all-users"
prefix = "user:"

[[rule]]
name = "binary"
exact = "00ff2a"
encoding = "hex"
threshold = 7

[[rule]]
name = "b64"
prefix = "gAE="
encoding = "base64"
"""


def test_first_match_wins_and_fields() -> None:
    rs = parse_rules(GOOD, "rules.toml")
    assert len(rs) == 6
    assert rs.match(b"healthcheck").name == "health"
    assert rs.match(b"healthcheck").ignore
    assert rs.match(b"cart:1").name == "carts"
    assert rs.match(b"cart:1").threshold == 50
    assert rs.match(b"cart:1").ttl_ms == 2000
    # "user:1:profile" matches both the glob and the later prefix: the glob is first.
    assert rs.match(b"user:1:profile").name == "profiles"
    assert rs.match(b"user:1:profile").threshold == 10.5
    assert rs.match(b"user:1:settings").name == "all-users"
    # fields not given come from [default]
    assert rs.match(b"user:1:settings").threshold == 200
    assert rs.match(b"user:1:settings").cooldown == 1.5
    assert rs.match(b"other").name == "default"
    assert rs.match(b"other").threshold == 200
    assert rs.match(b"other").ttl == 4
    assert rs.match(b"carts").name == "default"  # prefix is "cart:", not "cart"
    assert rs.min_threshold == 7  # the lowest threshold of a non-ignore rule


def test_precedence_is_file_order() -> None:
    wide = '[[rule]]\nname = "wide"\nprefix = "a"\nthreshold = 1\n'
    narrow = '[[rule]]\nname = "narrow"\nexact = "abc"\nthreshold = 2\n'
    assert parse_rules(wide + narrow).match(b"abc").name == "wide"
    assert parse_rules(narrow + wide).match(b"abc").name == "narrow"
    assert parse_rules(narrow + wide).match(b"abd").name == "wide"


def test_binary_keys_in_rules() -> None:
    rs = parse_rules(GOOD)
    assert rs.match(b"\x00\xff*").name == "binary"
    assert rs.match(b"\x00\xff*").threshold == 7
    assert rs.match(b"\x80\x01tail").name == "b64"
    assert rs.match(b"\x00\xff").name == "default"


def test_builtin_defaults() -> None:
    rs = RuleSet.default()
    r = rs.match(b"anything")
    assert (r.name, r.threshold, r.ttl, r.cooldown, r.ignore) == (
        "default",
        DEFAULT_THRESHOLD,
        5.0,
        2.0,
        False,
    )
    assert len(rs) == 0
    assert parse_rules("").match(b"x").threshold == DEFAULT_THRESHOLD


def test_default_rule_can_ignore_everything_else() -> None:
    rs = parse_rules('[default]\nignore = true\n[[rule]]\nname = "only"\nprefix = "hot:"\n')
    assert rs.match(b"cold").ignore
    assert not rs.match(b"hot:1").ignore


def test_keys_with_spaces_quotes_and_utf8() -> None:
    rs = parse_rules("""
[[rule]]
name = "q"
exact = 'say "hi" now'
[[rule]]
name = "u"
prefix = "caf\u00e9 "
[[rule]]
name = "g"
glob = "a\\\\*b"
""")
    assert rs.match(b'say "hi" now').name == "q"
    assert rs.match("café latte".encode()).name == "u"
    assert rs.match(b"a*b").name == "g"  # escaped star is literal
    assert rs.match(b"axb").name == "default"


def test_rule_cache_is_bounded_lru() -> None:
    rs = parse_rules(GOOD, cache_size=1000)
    for i in range(200_000):
        rs.match(b"user:%d:profile" % i)
    assert rs.cache_len == 1000
    # The most recently used keys are the ones kept.
    assert rs.match(b"user:199999:profile").name == "profiles"
    assert rs.cache_len == 1000


# -- glob -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("pattern", "key", "expected"),
    [
        (b"*", b"", True),
        (b"a*", b"abc", True),
        (b"*c", b"abc", True),
        (b"a*c", b"ac", True),
        (b"a*c", b"ab", False),
        (b"a?c", b"abc", True),
        (b"a?c", b"ac", False),
        (b"[abc]x", b"bx", True),
        (b"[!abc]x", b"bx", False),
        (b"[^abc]x", b"dx", True),
        (b"[a-c]*", b"cat", True),
        (b"[]]", b"]", True),
        (b"\\?", b"?", True),
        (b"\\?", b"a", False),
        (b"*\x00*", b"a\x00b", True),
        (b"a?b", b"a\nb", True),
        (b"*ab*ab*", b"xabyab", True),
        (b"*ab*ab*", b"xaby", False),
        (b"[\x80-\xff]*", b"\x90rest", True),
    ],
)
def test_glob_cases(pattern: bytes, key: bytes, expected: bool) -> None:
    assert Glob(pattern).match(key) is expected


@pytest.mark.parametrize("bad", [b"[abc", b"abc\\", b"[a\\"])
def test_glob_errors(bad: bytes) -> None:
    with pytest.raises(GlobError):
        Glob(bad)


def test_glob_no_catastrophic_backtracking() -> None:
    # fnmatch's translated regex backtracks exponentially on this; ours is linear.
    g = Glob(b"*a*a*a*a*a*a*a*a*a*a*a*a*b")
    assert not g.match(b"a" * 20000)
    assert g.match(b"a" * 20000 + b"b")


_TOKENS = st.sampled_from(["a", "b", "*", "?", "[ab]", "[!a]", "[a-b]", "c"])


@settings(max_examples=300, deadline=None)
@given(st.lists(_TOKENS, max_size=8).map("".join), st.text(alphabet="abc", max_size=10))
def test_glob_agrees_with_fnmatch(pattern: str, key: str) -> None:
    assert Glob(pattern.encode()).match(key.encode()) == fnmatch.fnmatchcase(key, pattern)


# -- files ------------------------------------------------------------------------------
def _err(text: str) -> str:
    with pytest.raises(RulesError) as ei:
        parse_rules(text, "rules.toml")
    return str(ei.value)


def test_error_names_line_rule_and_field() -> None:
    text = (
        '[[rule]]\nname = "a"\nprefix = "a:"\n\n[[rule]]\nname = "carts"\nprefix = "cart:"\n'
        '# comment\n\n\n\nthreshold = "abc"\n'
    )
    msg = _err(text)
    assert msg == "rules.toml line 12: rule 'carts': threshold must be a number > 0, got 'abc'"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '[[rule]]\nname = "x"\nprefix = "p"\nthreshold = -1\n',
            r"^rules\.toml line 4: rule 'x': threshold must be a number > 0, got -1$",
        ),
        (
            '[[rule]]\nname = "x"\nprefix = "p"\nthreshold = true\n',
            r"line 4: rule 'x': threshold .* got True",
        ),
        (
            '[[rule]]\nname = "x"\nprefix = "p"\n\nttl = 0\n',
            r"line 5: rule 'x': ttl must be a number > 0",
        ),
        (
            '[[rule]]\nname = "x"\nprefix = "p"\ncooldown = -0.5\n',
            r"line 4: rule 'x': cooldown must be a number >= 0",
        ),
        (
            '[[rule]]\nname = "x"\nprefix = "p"\nignore = "yes"\n',
            r"line 4: rule 'x': ignore must be true or false, got 'yes'",
        ),
        (
            '[[rule]]\nname = "x"\nprefix = "p"\nthresold = 5\n',
            r"line 4: rule 'x': unknown field 'thresold'",
        ),
        (
            '[[rule]]\nname = "x"\n',
            r"line 1: rule 'x': needs exactly one of exact, prefix or glob, got none",
        ),
        (
            '[[rule]]\nname = "x"\nprefix = "p"\nglob = "q*"\n',
            r"line 4: rule 'x': needs exactly one of .* got prefix and glob",
        ),
        (
            '[[rule]]\nname = "x"\nglob = "[ab"\n',
            r"line 3: rule 'x': glob '\[ab' is invalid: unterminated",
        ),
        (
            '[[rule]]\nname = "x"\nexact = "zz"\nencoding = "hex"\n',
            r"line 3: rule 'x': exact is not valid hex",
        ),
        (
            '[[rule]]\nname = "x"\nexact = "a"\nencoding = "rot13"\n',
            r"line 4: rule 'x': encoding must be",
        ),
        ('[[rule]]\nname = "x"\nexact = 5\n', r"line 3: rule 'x': exact must be a string, got 5"),
        (
            '[[rule]]\nprefix = "p"\n',
            r"line 1: rule #1: name must be a non-empty string .* missing",
        ),
        ('[[rule]]\nname = ""\nprefix = "p"\n', r"line 2: rule #1: name must be"),
        (
            '[[rule]]\nname = "x"\nprefix = "p"\n[[rule]]\nname = "x"\nprefix = "q"\n',
            r"line 5: rule 'x': name 'x' is already used",
        ),
        (
            '[[rule]]\nname = "default"\nprefix = "q"\n',
            r"line 2: rule 'default': name 'default' is already used",
        ),
        (
            '[default]\nthreshold = "lots"\n',
            r"line 2: \[default\]: threshold must be a number > 0, got 'lots'",
        ),
        ('[default]\nname = "d"\n', r"line 2: \[default\]: unknown field 'name'"),
        ("[defaults]\nthreshold = 1\n", r"line 1: top level: unknown table or key 'defaults'"),
        ("rule = 5\n", r"line 1: top level: 'rule' must be an array of tables"),
        (
            '[[rule]]\nname = "x"\nprefix = "p"\nthreshold = \n',
            r"^rules\.toml line 4: TOML syntax error",
        ),
        ('[[rule]\nname = "x"\n', r"^rules\.toml line 1: TOML syntax error"),
        (
            '[[rule]]\nname = "x"\nprefix = """\nmulti\nthreshold = 1\n"""\nthreshold = "no"\n',
            r"line 7: rule 'x': threshold",
        ),
    ],
)
def test_bad_files(text: str, expected: str) -> None:
    assert re.search(expected, _err(text)), _err(text)


def test_errors_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        parse_rules("[[rule]]\n")


def test_load_rules_from_file(tmp_path: Path) -> None:
    p = tmp_path / "rules.toml"
    p.write_text(GOOD)
    assert load_rules(p).match(b"cart:9").name == "carts"
    p.write_text(GOOD + '\n[[rule]]\nname = "late"\nprefix = "x"\nttl = "soon"\n')
    with pytest.raises(RulesError, match=rf"^{re.escape(str(p))} line \d+: rule 'late': ttl") as ei:
        load_rules(p)
    line = int(str(ei.value).split(" line ")[1].split(":")[0])
    assert p.read_text().splitlines()[line - 1] == 'ttl = "soon"'


def test_load_rules_unreadable(tmp_path: Path) -> None:
    with pytest.raises(RulesError, match="cannot read rules file"):
        load_rules(tmp_path / "missing.toml")
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b'[[rule]]\nname = "caf\xe9"\n')
    with pytest.raises(RulesError, match="not UTF-8"):
        load_rules(bad)
    assert os.path.exists(bad)


def test_rule_constructor_validates() -> None:
    with pytest.raises(RulesError, match="threshold"):
        Rule("x", threshold=0)
    with pytest.raises(RulesError, match="glob"):
        Rule("x", kind="glob", pattern=b"[")
    with pytest.raises(RulesError, match="duplicate"):
        RuleSet([Rule("a", "prefix", b"a"), Rule("a", "prefix", b"b")])
    assert base64.b64decode("gAE=") == b"\x80\x01"
