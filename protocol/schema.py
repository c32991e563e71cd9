"""One schema checker for every API body, driven by the message dataclasses' type hints.

A message is a dataclass whose fields are typed with:

* ``Int8``, ``Int16``, ``Int32``, ``Int64`` (``Annotated[int, IntRange]``; a plain ``int`` means int64):
  an ``int`` that is not a ``bool``, within the type's range;
* ``bool``, ``str``, ``bytes`` (msgpack ``bin``; bytearray / memoryview are accepted and copied), ``float``
  (an int is accepted);
* ``X | None``, ``list[X]``, ``dict[str, X]`` and nested message dataclasses.

Per-field constraints go into the field's metadata: ``{"min": 0}``, ``{"max": n}``, ``{"choices": (0, 1)}``.
On a ``list`` field they apply to each element. Constraints are only put where a value can never be valid;
values that Kafka answers with a specific error code (bad ``acks``, negative ``fetch_offset`` ...) pass the
schema so the broker can answer with that code.

``from_body(cls, body)`` checks a decoded msgpack body and builds the dataclass; any mismatch raises
:class:`~protocol.errors.InvalidRequestError` whose message names the field's full path, e.g.
``topics[0].partitions[2].fetch_offset: expected int, got str`` or ``missing field 'replica_id'``.
Fields with a default may be omitted; unknown fields are ignored (forward compatibility).
``to_body(obj)`` turns a dataclass back into plain dicts and lists (``bytes`` stay ``bytes``).

Both directions compile one function per class on first use (type hints are resolved once), with the
checks of primitive fields inlined, so the per-field cost is a few bytecodes.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from protocol.errors import InvalidRequestError

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class IntRange:
    name: str
    lo: int
    hi: int


Int8 = Annotated[int, IntRange("int8", -(2**7), 2**7 - 1)]
Int16 = Annotated[int, IntRange("int16", -(2**15), 2**15 - 1)]
Int32 = Annotated[int, IntRange("int32", -(2**31), 2**31 - 1)]
Int64 = Annotated[int, IntRange("int64", -(2**63), 2**63 - 1)]
_INT64_RANGE = IntRange("int64", -(2**63), 2**63 - 1)

Converter = Callable[[Any], Any]


class _Invalid(Exception):
    """Raised inside converters; the path is collected innermost first while it unwinds."""

    def __init__(self, reason: str, *, missing: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.missing = missing
        self.path: list[str | int] = []

    def render(self) -> str:
        parts: list[str] = []
        for part in reversed(self.path):
            if isinstance(part, int):
                parts.append(f"[{part}]")
            else:
                parts.append(f".{part}" if parts else part)
        path = "".join(parts)
        if self.missing:
            return f"missing field '{path}'"
        return f"{path}: {self.reason}" if path else self.reason


def _tn(value: Any) -> str:
    return "nil" if value is None else type(value).__name__


def _compile(name: str, source: str, namespace: dict[str, Any]) -> Any:
    exec(compile(source, f"<schema {name}>", "exec"), namespace)
    return namespace[name]


# ---------------------------------------------------------------------------------------------- types


@dataclass(frozen=True, slots=True)
class _Constraints:
    min: int | None = None
    max: int | None = None
    choices: tuple[Any, ...] | None = None


_NONE = _Constraints()


def _unwrap_optional(tp: Any) -> Any | None:
    """``X`` for ``X | None`` / ``Optional[X]``, else None."""
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != len(typing.get_args(tp)) - 1 or len(args) != 1:
            raise TypeError(f"unsupported union {tp!r}: only X | None")
        return args[0]
    return None


def _int_range(tp: Any) -> IntRange | None:
    if tp is int:
        return _INT64_RANGE
    if typing.get_origin(tp) is Annotated:
        base, *extras = typing.get_args(tp)
        ranges = [e for e in extras if isinstance(e, IntRange)]
        if base is int and ranges:
            return ranges[0]
    return None


def _fast_check(tp: Any, c: _Constraints, var: str, ns: dict[str, Any], key: str) -> str | None:
    """A Python expression that is true when ``var`` is already a valid, normalised value of ``tp``;
    None when no cheap inline check exists (then the converter is always called)."""
    choices = ""
    if c.choices is not None:
        ns[f"_ch{key}"] = frozenset(c.choices)
        choices = f" and {var} in _ch{key}"
    rng = _int_range(tp)
    if rng is not None:
        lo = rng.lo if c.min is None else max(rng.lo, c.min)
        hi = rng.hi if c.max is None else min(rng.hi, c.max)
        return f"({var}.__class__ is int and {lo} <= {var} <= {hi}{choices})"
    for simple in (bool, str, bytes, float):
        if tp is simple:
            return f"({var}.__class__ is {simple.__name__}{choices})"
    inner = _unwrap_optional(tp)
    if inner is not None:
        inner_check = _fast_check(inner, c, var, ns, key)
        return None if inner_check is None else f"({var} is None or {inner_check})"
    return None


def _int_converter(rng: IntRange, c: _Constraints) -> Converter:
    def convert(x: Any) -> Any:
        if not isinstance(x, int) or isinstance(x, bool):
            raise _Invalid(f"expected int, got {_tn(x)}")
        x = int(x)
        if not rng.lo <= x <= rng.hi:
            raise _Invalid(f"{x} is out of {rng.name} range")
        if c.min is not None and x < c.min:
            raise _Invalid(f"must be >= {c.min}, got {x}")
        if c.max is not None and x > c.max:
            raise _Invalid(f"must be <= {c.max}, got {x}")
        if c.choices is not None and x not in c.choices:
            raise _Invalid(f"must be one of {list(c.choices)}, got {x}")
        return x

    return convert


def _simple_converter(tp: type, c: _Constraints) -> Converter:
    def convert(x: Any) -> Any:
        if tp is bytes and isinstance(x, bytearray | memoryview):
            x = bytes(x)
        elif tp is float and isinstance(x, int) and not isinstance(x, bool):
            x = float(x)
        elif not isinstance(x, tp) or (tp is not bool and isinstance(x, bool)):
            raise _Invalid(f"expected {tp.__name__}, got {_tn(x)}")
        if c.choices is not None and x not in c.choices:
            raise _Invalid(f"must be one of {list(c.choices)}, got {x!r}")
        return x

    return convert


def _optional_converter(inner: Converter) -> Converter:
    def convert(x: Any) -> Any:
        return None if x is None else inner(x)

    return convert


def _locate(items: list[Any], inner: Converter, exc: _Invalid) -> _Invalid:
    """After a comprehension failed, find the failing index (converters are deterministic)."""
    for index, item in enumerate(items):
        try:
            inner(item)
        except _Invalid as again:
            again.path.append(index)
            return again
    return exc


def _list_converter(elem: Any, c: _Constraints, key: str) -> Converter:
    inner = _converter(elem, c, key + "e")
    ns: dict[str, Any] = {"_Invalid": _Invalid, "_tn": _tn, "_inner": inner, "_locate": _locate}
    check = _fast_check(elem, c, "i", ns, key + "e")
    if check is not None:
        # Primitive elements: one pass of inline checks, the list itself is returned when all pass.
        source = f"""
def _list(x):
    if x.__class__ is not list:
        if not isinstance(x, (list, tuple)):
            raise _Invalid("expected array, got " + _tn(x))
        x = list(x)
    for i in x:
        if not {check}:
            break
    else:
        return x
    try:
        return [_inner(i) for i in x]
    except _Invalid as exc:
        raise _locate(x, _inner, exc) from None
"""
    else:
        source = """
def _list(x):
    if x.__class__ is not list:
        if not isinstance(x, (list, tuple)):
            raise _Invalid("expected array, got " + _tn(x))
        x = list(x)
    try:
        return [_inner(i) for i in x]
    except _Invalid as exc:
        raise _locate(x, _inner, exc) from None
"""
    return typing.cast(Converter, _compile("_list", source, ns))


def _dict_converter(key_tp: Any, value_tp: Any, c: _Constraints, key: str) -> Converter:
    if key_tp is not str:
        raise TypeError("map keys must be str")
    inner = _converter(value_tp, c, key + "v")

    def convert(x: Any) -> Any:
        if type(x) is not dict:
            raise _Invalid(f"expected map, got {_tn(x)}")
        out = {}
        for k, v in x.items():
            if type(k) is not str:
                raise _Invalid(f"map keys must be str, got {_tn(k)}")
            try:
                out[k] = inner(v)
            except _Invalid as exc:
                exc.path.append(k)
                raise
        return out

    return convert


def _converter(tp: Any, c: _Constraints = _NONE, key: str = "") -> Converter:
    rng = _int_range(tp)
    if rng is not None:
        return _int_converter(rng, c)
    if tp in (bool, str, bytes, float):
        return _simple_converter(tp, c)
    inner = _unwrap_optional(tp)
    if inner is not None:
        return _optional_converter(_converter(inner, c, key))
    origin = typing.get_origin(tp)
    if origin is list:
        (elem,) = typing.get_args(tp)
        return _list_converter(elem, c, key)
    if origin is dict:
        key_tp, value_tp = typing.get_args(tp)
        return _dict_converter(key_tp, value_tp, c, key)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _decoder_for(tp)
    raise TypeError(f"unsupported field type {tp!r}")


# --------------------------------------------------------------------------------------- from_body

_decoders: dict[type, Converter] = {}


def _constraints(f: dataclasses.Field[Any]) -> _Constraints:
    meta = f.metadata
    if not meta:
        return _NONE
    choices = meta.get("choices")
    return _Constraints(meta.get("min"), meta.get("max"), tuple(choices) if choices is not None else None)


def _decoder_for(cls: type) -> Converter:
    decoder = _decoders.get(cls)
    if decoder is not None:
        return decoder
    # Placeholder so that a (theoretical) self-referencing message resolves lazily.
    _decoders[cls] = lambda x: _decoders[cls](x)
    try:
        decoder = _build_decoder(cls)
    except BaseException:
        del _decoders[cls]
        raise
    _decoders[cls] = decoder
    return decoder


def _build_decoder(cls: type) -> Converter:
    hints = typing.get_type_hints(cls, include_extras=True)
    ns: dict[str, Any] = {"_Invalid": _Invalid, "_tn": _tn, "_cls": cls}
    lines = [
        "def _decode(v):",
        "    if v.__class__ is not dict:",
        "        raise _Invalid('expected map, got ' + _tn(v))",
    ]
    kwargs = []
    for n, f in enumerate(dataclasses.fields(cls)):
        if not f.init:
            continue
        tp = hints[f.name]
        c = _constraints(f)
        key = f"{n}"
        ns[f"_c{key}"] = _converter(tp, c, key)
        name = repr(f.name)
        lines += ["    try:", f"        x = v[{name}]", "    except KeyError:"]
        if f.default is not dataclasses.MISSING:
            ns[f"_d{key}"] = f.default
            lines.append(f"        x = _d{key}")
        elif f.default_factory is not dataclasses.MISSING:
            ns[f"_f{key}"] = f.default_factory
            lines.append(f"        x = _f{key}()")
        else:
            lines += [
                f"        exc = _Invalid('missing', missing=True); exc.path.append({name})",
                "        raise exc from None",
            ]
        check = _fast_check(tp, c, "x", ns, key)
        indent = "    else:"
        lines.append(indent)
        body_indent = "        "
        if check is not None:
            lines.append(f"        if not {check}:")
            body_indent = "            "
        lines += [
            f"{body_indent}try:",
            f"{body_indent}    x = _c{key}(x)",
            f"{body_indent}except _Invalid as exc:",
            f"{body_indent}    exc.path.append({name})",
            f"{body_indent}    raise",
            f"    f{key} = x",
        ]
        kwargs.append(f"{f.name}=f{key}")
    lines.append(f"    return _cls({', '.join(kwargs)})")
    return typing.cast(Converter, _compile("_decode", "\n".join(lines) + "\n", ns))


def from_body(cls: type[T], body: Any) -> T:
    """Check ``body`` (a decoded msgpack map) against ``cls`` and build it; raises InvalidRequestError."""
    decoder = _decoders.get(cls) or _decoder_for(cls)
    try:
        return typing.cast(T, decoder(body))
    except _Invalid as exc:
        raise InvalidRequestError(exc.render()) from None


# ----------------------------------------------------------------------------------------- to_body

_encoders: dict[type, Converter] = {}


def _generic_encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _encoder_for(type(value))(value)
    if isinstance(value, list | tuple):
        return [_generic_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _generic_encode(v) for k, v in value.items()}
    return value


def _is_plain(tp: Any) -> bool:
    """True when values of ``tp`` are already msgpack-ready (no dataclass inside)."""
    if _int_range(tp) is not None or tp in (bool, str, bytes, float):
        return True
    inner = _unwrap_optional(tp)
    if inner is not None:
        return _is_plain(inner)
    origin = typing.get_origin(tp)
    if origin in (list, dict):
        return all(_is_plain(a) for a in typing.get_args(tp))
    return False


def _encode_expr(tp: Any, expr: str, ns: dict[str, Any], key: str) -> str:
    if _is_plain(tp):
        return expr
    inner = _unwrap_optional(tp)
    if inner is not None:
        return f"(None if {expr} is None else {_encode_expr(inner, expr, ns, key)})"
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        ns[f"_e{key}"] = _encoder_for(tp)
        return f"_e{key}({expr})"
    if typing.get_origin(tp) is list:
        (elem,) = typing.get_args(tp)
        var = f"i{len(key)}"
        return f"[{_encode_expr(elem, var, ns, key + 'e')} for {var} in {expr}]"
    return f"_generic({expr})"


def _encoder_for(cls: type) -> Converter:
    encoder = _encoders.get(cls)
    if encoder is not None:
        return encoder
    _encoders[cls] = lambda o: _encoders[cls](o)
    try:
        encoder = _build_encoder(cls)
    except BaseException:
        del _encoders[cls]
        raise
    _encoders[cls] = encoder
    return encoder


def _build_encoder(cls: type) -> Converter:
    hints = typing.get_type_hints(cls, include_extras=True)
    ns: dict[str, Any] = {"_generic": _generic_encode}
    items = []
    for n, f in enumerate(dataclasses.fields(cls)):
        expr = _encode_expr(hints[f.name], f"o.{f.name}", ns, str(n))
        items.append(f"{f.name!r}: {expr}")
    source = "def _encode(o):\n    return {" + ", ".join(items) + "}\n"
    return typing.cast(Converter, _compile("_encode", source, ns))


def to_body(obj: Any) -> dict[str, Any]:
    """A message dataclass as a plain dict/list tree ready for msgpack. A dict is returned unchanged."""
    if type(obj) is dict:
        return obj
    encoder = _encoders.get(type(obj))
    if encoder is None:
        if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
            raise TypeError(f"to_body expects a message dataclass or a dict, got {type(obj).__name__}")
        encoder = _encoder_for(type(obj))
    return typing.cast(dict[str, Any], encoder(obj))


__all__ = ["Int8", "Int16", "Int32", "Int64", "IntRange", "from_body", "to_body"]
