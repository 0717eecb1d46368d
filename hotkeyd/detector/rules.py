"""Detection rules: which threshold, TTL and cool-down apply to a key.

A :class:`RuleSet` is an ordered list of :class:`Rule` plus a default rule. The
first rule whose match (exact key, prefix, or glob) fits a key wins; keys no rule
matches get the default rule. Keys are untrusted bytes, so matching is on bytes and
glob matching is linear-time (no regex backtracking, see :class:`Glob`). Lookups are
cached per key in a bounded LRU so that the tick loop, which asks again for the same
candidate keys every tick, pays for the match only once while memory stays bounded
whatever the key cardinality.

Rules files are TOML (see ``docs/detection.md``)::

    [default]                # optional; built-in defaults otherwise
    threshold = 1000         # accesses per second
    ttl = 5.0                # seconds clients may cache a hot key
    cooldown = 2.0           # seconds below threshold*hysteresis before it cools

    [[rule]]
    name = "carts"
    prefix = "cart:"         # or exact = "...", or glob = "user:*:profile"
    threshold = 500          # threshold / ttl / cooldown default to [default]'s
    ttl = 2.0

    [[rule]]
    name = "binary"
    exact = "00ff2a"
    encoding = "hex"         # utf-8 (default), hex or base64: how the pattern becomes bytes
    ignore = true            # matching keys never turn hot

Parsing and validation (:func:`parse_rules`, :func:`load_rules`) are separate from
installing the rules (``Detector.set_rules``), so a bad file raises
:class:`~hotkeyd.errors.RulesError` and leaves the rules in force untouched.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hotkeyd.detector.glob import Glob, GlobError
from hotkeyd.detector.rules_toml import decode_pattern, locate_fields, parse_toml
from hotkeyd.errors import RulesError
from hotkeyd.protocol import limits

__all__ = [
    "DEFAULT_COOLDOWN",
    "DEFAULT_THRESHOLD",
    "DEFAULT_TTL",
    "Rule",
    "RuleSet",
    "load_rules",
    "parse_rules",
]

DEFAULT_THRESHOLD = 1000.0
DEFAULT_TTL = 5.0
DEFAULT_COOLDOWN = 2.0
DEFAULT_CACHE_SIZE = 16384

_MATCH_FIELDS = ("exact", "prefix", "glob")
_RULE_FIELDS = frozenset(
    {"name", *_MATCH_FIELDS, "encoding", "threshold", "ttl", "cooldown", "ignore"}
)
_DEFAULT_FIELDS = frozenset({"threshold", "ttl", "cooldown", "ignore"})
_MAX_TTL = limits.TTL_MS_MAX / 1000  # a rule's TTL must fit the wire's ttl_ms
_MAX_COOLDOWN = 3600.0
_MAX_NAME = 200


@dataclass(frozen=True)
class Rule:
    """One rule.

    Attributes:
        name: shown in notifications (``rule`` field) and metrics.
        kind: ``"exact"``, ``"prefix"``, ``"glob"`` or ``"all"`` (the default rule).
        pattern: the pattern bytes.
        threshold: accesses per second at which a key turns hot.
        ttl: seconds clients may cache a hot key locally; re-announced at ``ttl/2``.
        cooldown: seconds a hot key must stay below ``threshold * hysteresis`` to cool.
        ignore: keys matching this rule never turn hot.
        line: line of the rule in its file, for messages (None when built in code).
    """

    name: str
    kind: str = "all"
    pattern: bytes = b""
    threshold: float = DEFAULT_THRESHOLD
    ttl: float = DEFAULT_TTL
    cooldown: float = DEFAULT_COOLDOWN
    ignore: bool = False
    line: int | None = None
    _glob: Glob | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in ("exact", "prefix", "glob", "all"):
            raise RulesError(f"rule {self.name!r}: unknown match kind {self.kind!r}")
        if not isinstance(self.pattern, bytes):
            raise TypeError(
                f"rule {self.name!r}: pattern must be bytes, got {type(self.pattern).__name__}"
            )
        for fname, lo, hi in (("threshold", 0.0, math.inf), ("ttl", 0.0, _MAX_TTL)):
            v = getattr(self, fname)
            if not (_is_number(v) and lo < v <= hi):
                raise RulesError(
                    f"rule {self.name!r}: {fname} must be a number in ({lo:g}, {hi:g}], got {v!r}"
                )
        if not (_is_number(self.cooldown) and 0.0 <= self.cooldown <= _MAX_COOLDOWN):
            raise RulesError(
                f"rule {self.name!r}: cooldown must be a number in [0, {_MAX_COOLDOWN:g}], got {self.cooldown!r}"
            )
        if self.kind == "glob" and self._glob is None:
            try:
                object.__setattr__(self, "_glob", Glob(self.pattern))
            except GlobError as exc:
                raise RulesError(f"rule {self.name!r}: glob: {exc}") from exc

    @property
    def ttl_ms(self) -> int:
        """TTL in whole milliseconds, as published on the wire."""
        return max(1, round(self.ttl * 1000))

    def matches(self, key: bytes) -> bool:
        """Whether ``key`` fits this rule's match (ignores ``ignore``)."""
        if self.kind == "exact":
            return key == self.pattern
        if self.kind == "prefix":
            return key.startswith(self.pattern)
        if self.kind == "glob":
            assert self._glob is not None
            return self._glob.match(key)
        return True


class RuleSet:
    """An ordered list of rules plus a default; immutable once built.

    Args:
        rules: checked in order; the first match wins.
        default: the rule for keys nothing matches (built-in defaults when None).
        cache_size: bound of the per-key lookup LRU (entries).
        source: where the rules came from, for logs.

    Not thread-safe by itself: the detector uses it from one thread. Replacing the
    whole RuleSet (``Detector.set_rules``) is the atomic reload.
    """

    def __init__(
        self,
        rules: Sequence[Rule] = (),
        default: Rule | None = None,
        *,
        cache_size: int = DEFAULT_CACHE_SIZE,
        source: str = "",
    ) -> None:
        if cache_size < 1:
            raise RulesError(f"cache_size must be >= 1, got {cache_size}")
        self.rules: tuple[Rule, ...] = tuple(rules)
        self.default_rule: Rule = default if default is not None else Rule("default")
        if self.default_rule.kind != "all":
            raise RulesError("the default rule must match all keys")
        names = [r.name for r in self.rules]
        dup = {n for n in names if names.count(n) > 1 or n == self.default_rule.name}
        if dup:
            raise RulesError(f"duplicate rule name(s): {sorted(dup)}")
        self.source = source
        # No key below the lowest threshold of any non-ignore rule can turn hot, so the
        # detector skips the rule lookup for those (most keys rated at a tick).
        live = [r.threshold for r in (*self.rules, self.default_rule) if not r.ignore]
        self.min_threshold: float = min(live) if live else float("inf")
        self._cache_size = cache_size
        self._cache: OrderedDict[bytes, Rule] = OrderedDict()
        # Exact rules that come before any non-exact rule can be looked up in a dict.
        self._exact_head: dict[bytes, Rule] = {}
        self._rest: tuple[Rule, ...] = self.rules
        for i, r in enumerate(self.rules):
            if r.kind != "exact":
                self._rest = self.rules[i:]
                break
            self._exact_head.setdefault(r.pattern, r)
        else:
            self._rest = ()

    @classmethod
    def default(cls) -> RuleSet:
        """A rule set with only the built-in default rule."""
        return cls(source="<built-in>")

    def __len__(self) -> int:
        return len(self.rules)

    def __bool__(self) -> bool:
        # A set without explicit rules still has its default rule: never "empty".
        return True

    def __iter__(self) -> Iterator[Rule]:
        return iter(self.rules)

    def __repr__(self) -> str:
        return f"RuleSet({len(self.rules)} rules, default={self.default_rule!r}, source={self.source!r})"

    def match(self, key: bytes) -> Rule:
        """Return the first rule matching ``key`` (the default rule if none does)."""
        cache = self._cache
        hit = cache.get(key)
        if hit is not None:
            cache.move_to_end(key)
            return hit
        rule = self._match_uncached(key)
        cache[key] = rule
        if len(cache) > self._cache_size:
            cache.popitem(last=False)
        return rule

    def _match_uncached(self, key: bytes) -> Rule:
        hit = self._exact_head.get(key)
        if hit is not None:
            return hit
        for r in self._rest:
            if r.matches(key):
                return r
        return self.default_rule

    @property
    def cache_len(self) -> int:
        """Entries in the lookup cache (bounded by ``cache_size``)."""
        return len(self._cache)

    @property
    def cache_size(self) -> int:
        return self._cache_size


def _is_number(v: Any) -> bool:
    """A finite int or float that fits a float (a 400-digit integer does not)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


class _Ctx:
    """Builds error messages that name the file, line, rule and field."""

    def __init__(self, path: str, lines: dict[tuple[Any, ...], int]) -> None:
        self.path = path
        self.lines = lines

    def fail(self, table: tuple[Any, ...], label: str, fld: str | None, msg: str) -> RulesError:
        line = self.lines.get((*table, fld)) if fld else None
        if line is None:
            line = self.lines.get(table)
        where = f"{self.path} line {line}" if line is not None else self.path
        return RulesError(f"{where}: {label}: {msg}")


def _got(v: Any) -> str:
    if isinstance(v, (dict, list)):
        return f"got a {type(v).__name__}"
    shown = repr(v)
    return f"got {shown}" if len(shown) <= 60 else f"got {shown[:40]}... ({len(shown)} characters)"


def _number(
    ctx: _Ctx,
    table: tuple[Any, ...],
    label: str,
    data: dict[str, Any],
    fld: str,
    lo: float,
    hi: float,
    lo_open: bool,
    fallback: float,
) -> float:
    if fld not in data:
        return fallback
    v = data[fld]
    ok = _is_number(v) and (lo < v if lo_open else lo <= v) and v <= hi
    if not ok:
        rng = f"> {lo:g}" if lo_open else f">= {lo:g}"
        if hi != math.inf:
            rng += f" and <= {hi:g}"
        raise ctx.fail(table, label, fld, f"{fld} must be a number {rng}, {_got(v)}")
    return float(v)


def _bool(ctx: _Ctx, table: tuple[Any, ...], label: str, data: dict[str, Any], fld: str) -> bool:
    v = data.get(fld, False)
    if not isinstance(v, bool):
        raise ctx.fail(table, label, fld, f"{fld} must be true or false, {_got(v)}")
    return v


def _unknown(
    ctx: _Ctx, table: tuple[Any, ...], label: str, data: dict[str, Any], allowed: frozenset[str]
) -> None:
    for k in data:
        if k not in allowed:
            raise ctx.fail(
                table, label, k, f"unknown field {k!r} (allowed: {', '.join(sorted(allowed))})"
            )


def _parse_default(ctx: _Ctx, data: Any) -> Rule:
    table: tuple[Any, ...] = ("default",)
    label = "[default]"
    if not isinstance(data, dict):
        raise ctx.fail(table, label, None, f"[default] must be a table, {_got(data)}")
    _unknown(ctx, table, label, data, _DEFAULT_FIELDS)
    return Rule(
        "default",
        threshold=_number(
            ctx, table, label, data, "threshold", 0, math.inf, True, DEFAULT_THRESHOLD
        ),
        ttl=_number(ctx, table, label, data, "ttl", 0, _MAX_TTL, True, DEFAULT_TTL),
        cooldown=_number(
            ctx, table, label, data, "cooldown", 0, _MAX_COOLDOWN, False, DEFAULT_COOLDOWN
        ),
        ignore=_bool(ctx, table, label, data, "ignore"),
        line=ctx.lines.get(table),
    )


def _parse_rule(ctx: _Ctx, i: int, data: Any, default: Rule, seen: set[str]) -> Rule:
    table: tuple[Any, ...] = ("rule", i)
    label = f"rule #{i + 1}"
    if not isinstance(data, dict):
        raise ctx.fail(table, label, None, f"each [[rule]] must be a table, {_got(data)}")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > _MAX_NAME:
        raise ctx.fail(
            table,
            label,
            "name" if "name" in data else None,
            f"name must be a non-empty string of at most {_MAX_NAME} characters, "
            + ("missing" if name is None else _got(name)),
        )
    label = f"rule {name!r}"
    if name in seen or name == default.name:
        raise ctx.fail(table, label, "name", f"name {name!r} is already used by another rule")
    seen.add(name)
    _unknown(ctx, table, label, data, _RULE_FIELDS)
    given = [f for f in _MATCH_FIELDS if f in data]
    if len(given) != 1:
        what = "none" if not given else " and ".join(given)
        raise ctx.fail(
            table,
            label,
            given[1] if len(given) > 1 else None,
            f"needs exactly one of exact, prefix or glob, got {what}",
        )
    kind = given[0]
    encoding = data.get("encoding", "utf-8")
    if encoding not in ("utf-8", "hex", "base64"):
        raise ctx.fail(
            table,
            label,
            "encoding",
            f"encoding must be 'utf-8', 'hex' or 'base64', {_got(encoding)}",
        )
    raw = data[kind]
    if not isinstance(raw, str):
        raise ctx.fail(table, label, kind, f"{kind} must be a string, {_got(raw)}")
    try:
        pattern = decode_pattern(raw, encoding)
    except ValueError as exc:
        raise ctx.fail(table, label, kind, f"{kind} is not valid {encoding}: {exc}") from exc
    glob = None
    if kind == "glob":
        try:
            glob = Glob(pattern)
        except GlobError as exc:
            raise ctx.fail(table, label, kind, f"glob {raw!r} is invalid: {exc}") from exc
    return Rule(
        name,
        kind=kind,
        pattern=pattern,
        threshold=_number(
            ctx, table, label, data, "threshold", 0, math.inf, True, default.threshold
        ),
        ttl=_number(ctx, table, label, data, "ttl", 0, _MAX_TTL, True, default.ttl),
        cooldown=_number(
            ctx, table, label, data, "cooldown", 0, _MAX_COOLDOWN, False, default.cooldown
        ),
        ignore=_bool(ctx, table, label, data, "ignore"),
        line=ctx.lines.get(table),
        _glob=glob,
    )


def parse_rules(
    text: str, source: str = "<rules>", *, cache_size: int = DEFAULT_CACHE_SIZE
) -> RuleSet:
    """Parse and validate a rules file's text.

    Args:
        text: TOML source.
        source: file name used in error messages (``"<source> line N: ..."``).
        cache_size: bound of the rule lookup LRU.

    Raises:
        RulesError: naming the line, rule and field at fault; nothing else, whatever
            the text (deep nesting, 400-digit numbers ...).
    """
    try:
        return _parse_rules(text, source, cache_size)
    except RulesError:
        raise
    except RecursionError:
        raise RulesError(f"{source}: nested too deeply") from None
    except Exception as exc:  # e.g. OverflowError: a 400-digit threshold
        raise RulesError(
            f"{source}: invalid value: {type(exc).__name__}: {str(exc)[:120]}"
        ) from None


def _parse_rules(text: str, source: str, cache_size: int) -> RuleSet:
    data = parse_toml(text, source)
    ctx = _Ctx(source, locate_fields(text))
    top: tuple[Any, ...] = ()
    for k in data:
        if k not in ("default", "rule"):
            raise ctx.fail(
                top, "top level", k, f"unknown table or key {k!r} (allowed: [default], [[rule]])"
            )
    default = _parse_default(ctx, data["default"]) if "default" in data else Rule("default")
    rules_raw = data.get("rule", [])
    if not isinstance(rules_raw, list):
        raise ctx.fail(top, "top level", "rule", "'rule' must be an array of tables ([[rule]])")
    seen: set[str] = set()
    rules = [_parse_rule(ctx, i, r, default, seen) for i, r in enumerate(rules_raw)]
    return RuleSet(rules, default, cache_size=cache_size, source=source)


def load_rules(path: str | Path, *, cache_size: int = DEFAULT_CACHE_SIZE) -> RuleSet:
    """Read and validate the rules file at ``path``.

    Raises:
        RulesError: the file cannot be read or is invalid (the message names it).
    """
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8")
    except OSError as exc:
        raise RulesError(f"{path}: cannot read rules file: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise RulesError(f"{path}: rules file is not UTF-8: {exc}") from exc
    return parse_rules(text, str(path), cache_size=cache_size)
