"""How a setting's value is read and written: its kind, its rule, and its parser.

A setting's value arrives as text (a flag, a `POOLED_*` variable, a string in the config file)
or as data (a TOML value in the config file, a JSON value in `PATCH /v1/config`). One `Parser`
reads both, so a rule such as "1 or more" holds whichever way the value came; the rule is data
(`Rule`) rather than a check buried in a function, so `GET /v1/config/fields` and
docs/configuration.md can state it. Data is read strictly: an integer setting takes an integer,
never `"16"` or `true` (text is what flags and variables are for).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["string", "integer", "number", "boolean", "list"]
KIND_NAMES = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false"}


@dataclass(frozen=True)
class Rule:
    """The values a setting allows beyond its kind: a range, or a list of choices."""

    minimum: float | None = None  # the least value allowed
    exclusive_minimum: float | None = None  # every value must be above it
    maximum: float | None = None
    choices: tuple[str, ...] = ()

    def allows(self, value: Any) -> bool:
        if self.choices:
            return value in self.choices
        return (
            (self.minimum is None or value >= self.minimum)
            and (self.exclusive_minimum is None or value > self.exclusive_minimum)
            and (self.maximum is None or value <= self.maximum)
        )

    def __str__(self) -> str:
        if self.choices:
            return "one of " + ", ".join(self.choices)
        low = self.minimum if self.minimum is not None else self.exclusive_minimum
        if low is not None and self.maximum is not None:
            return f"{_number(low)} to {_number(self.maximum)}"
        if self.exclusive_minimum is not None:
            return f"above {_number(self.exclusive_minimum)}"
        if self.minimum is not None:
            return f"{_number(self.minimum)} or more"
        return f"{_number(self.maximum or 0)} or less"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


class Parser:
    """Reads one setting's value (one item of a repeatable one) from text or data; a value that
    breaks its kind or rule raises ValueError saying what is allowed. Callable, as argparse's
    `type=`; `__name__` is what argparse's "invalid ... value" names."""

    def __init__(
        self,
        name: str,
        kind: Kind,
        read: Callable[[str], Any],
        *,
        rule: Rule | None = None,
        nulls: Sequence[str] | None = None,
        write: Callable[[Any], Any] | None = None,
        what: str | None = None,
    ) -> None:
        self.__name__ = name
        self._what = what
        self.kind: Kind = kind
        self.rule = rule
        self.nullable = nulls is not None  # the setting may be unset (None; JSON null)
        self._nulls = tuple(nulls or ())
        self._read = read
        self._write = write

    def expects(self) -> str:
        """What the setting takes, for error messages: "an integer of 1 or more, or null"."""
        what = self._what or ("a list of strings" if self.kind == "list" else KIND_NAMES[self.kind])
        if self.rule is not None:
            rule = str(self.rule)
            what += f" ({rule})" if self.rule.choices else f" {rule}" if rule.startswith("above") else f" of {rule}"
        return what + (", or null" if self.nullable else "")

    def __call__(self, text: str) -> Any:
        if self.nullable and text.lower() in self._nulls:
            return None
        return self._checked(self._read(text))

    def from_data(self, data: Any) -> Any:
        """A JSON or TOML value, of this kind exactly."""
        if data is None:
            if self.nullable:
                return None
            raise ValueError(self.expects())
        if self.kind == "list":
            if not isinstance(data, list) or not all(isinstance(item, str) for item in data):
                raise ValueError(self.expects())
            return self._checked(self._read(",".join(data)))
        if not _is_kind(data, self.kind):
            raise ValueError(self.expects())
        if self.kind == "string":
            return self(data)  # as its text: "" is unset where the setting may be
        return self._checked(float(data) if self.kind == "number" else data)

    def to_data(self, value: Any) -> Any:
        """The value as JSON: tuples as lists, a NAME=VALUE pair as its text."""
        if value is None:
            return None
        if self._write is not None:
            return self._write(value)
        if self.kind == "number":
            return float(value)
        return list(value) if isinstance(value, tuple) else value

    def _checked(self, value: Any) -> Any:
        if value is not None and self.rule is not None and not self.rule.allows(value):
            raise ValueError(self.expects())
        return value


def _is_kind(data: Any, kind: Kind) -> bool:
    if kind == "boolean":
        return isinstance(data, bool)
    if kind == "integer":
        return isinstance(data, int) and not isinstance(data, bool)
    if kind == "number":
        return isinstance(data, int | float) and not isinstance(data, bool)
    return isinstance(data, str)


def _integer_text(text: str) -> int:
    return int(text)


def text(nullable: bool = False) -> Parser:
    """Any string; a nullable one reads "" as unset."""
    return Parser("string", "string", str, nulls=("",) if nullable else None)


def _host_port_text(value: str) -> str:
    host, separator, port = value.rpartition(":")
    if not separator or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("HOST:PORT, e.g. 127.0.0.1:9090")
    return value


def host_port(nullable: bool = False) -> Parser:
    """An address to listen on, as HOST:PORT; a nullable one reads "" and "none" as unset."""
    nulls = ("", "none") if nullable else None
    return Parser("HOST:PORT", "string", _host_port_text, nulls=nulls, what="a string HOST:PORT")


def integer(minimum: int | None = None, maximum: int | None = None, nullable: bool = False) -> Parser:
    """A nullable one reads "", "auto" and "none" as unset."""
    rule = Rule(minimum=minimum, maximum=maximum) if minimum is not None or maximum is not None else None
    name = {0: "count", 1: "positive count"}.get(minimum, "int") if minimum is not None and maximum is None else "int"
    return Parser(name, "integer", _integer_text, rule=rule, nulls=("", "auto", "none") if nullable else None)


def number(
    above: float | None = None, minimum: float | None = None, maximum: float | None = None, nullable: bool = False
) -> Parser:
    """Seconds and such; a nullable one reads "", "none" and "off" as unset."""
    bounded = above is not None or minimum is not None or maximum is not None
    rule = Rule(minimum=minimum, exclusive_minimum=above, maximum=maximum) if bounded else None
    return Parser("float", "number", float, rule=rule, nulls=("", "none", "off") if nullable else None)


def _switch(value: str) -> bool:
    if value.lower() in ("true", "1", "yes", "on"):
        return True
    if value.lower() in ("false", "0", "no", "off"):
        return False
    raise ValueError("true or false")


def boolean() -> Parser:
    return Parser("true/false", "boolean", _switch)  # argparse says "invalid true/false value"


def one_of(*choices: str) -> Parser:
    return Parser("choice", "string", str, rule=Rule(choices=choices))  # argparse says "invalid choice value"


def _regex(value: str) -> str:
    try:  # an invalid expression fails at start-up (or its PATCH), naming the setting, not at the first request
        re.compile(value)
    except re.error as error:
        raise ValueError(f"a regular expression ({error})") from None
    return value


def regex() -> Parser:
    """A regular expression; "" is unset."""
    return Parser("regular expression", "string", _regex, nulls=("",), what="a regular expression")


def _named(value: str) -> tuple[str, str]:
    name, separator, rest = value.partition("=")
    if not separator or not name.strip() or not rest.strip():
        raise ValueError("NAME=VALUE")
    return name.strip(), rest.strip()


def named() -> Parser:
    """One NAME=VALUE item of a repeatable setting; as JSON, the same text."""
    return Parser("NAME=VALUE", "string", _named, write=lambda pair: f"{pair[0]}={pair[1]}", what="NAME=VALUE")


def _origins(value: str) -> tuple[str, ...]:
    return tuple(origin.strip().rstrip("/") for origin in value.split(",") if origin.strip())


def origins() -> Parser:
    """Browser origins, comma-separated as text, a list of strings as data."""
    return Parser("origins", "list", _origins, what="a list of origins (scheme://host[:port])")


def _hosts(value: str) -> tuple[str, ...]:
    return tuple(host.strip().lower() for host in value.split(",") if host.strip())


def hosts() -> Parser:
    """Host header values (NAME or NAME:PORT), comma-separated as text, a list of strings as data."""
    return Parser("hosts", "list", _hosts, what="a list of hosts (NAME or NAME:PORT)")


class SettingsError(Exception):
    """A setting that cannot be read at start-up: the message names it and where it came from
    (the flag, the variable, or the config file and its key)."""


MIB = 1024 * 1024

Change = Literal["live", "reload", "restart"]


def setting(
    default: Any,
    parse: Parser,
    help_text: str,
    repeatable: bool = False,
    change: Change = "reload",
    secret: bool = False,
) -> Any:
    """A dataclass field that carries its parser, its documentation, how a change to it takes
    effect and whether it is secret. A `repeatable` one is a tuple: its flag may be given several
    times, its variable holds comma-separated items, its JSON or TOML value is a list, and `parse`
    reads one item."""
    metadata = {"parse": parse, "help": help_text, "repeatable": repeatable, "change": change, "secret": secret}
    return field(default=default, metadata=metadata)
