"""Loading, validating, expanding and composing config files.

Every problem is reported as a :class:`~ootest.errors.Problem` with the file,
line and column, the key path, what was expected and what was found. All
problems of a file are collected before raising, so one run of
``ootest config validate`` lists them all.
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import difflib
import gc
import hashlib
import marshal
import operator
import os
import sys
import time
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from ootest.atomic import write_atomic
from ootest.cache import cache_dir
from ootest.config import paths
from ootest.config.base import set_private
from ootest.config.model import (
    CASES_KEYS,
    MODES,
    CasesDocument,
    Document,
    GlobalCaps,
    Selectors,
    TestSuiteConfig,
)
from ootest.config.names import NamePattern, NameSyntaxError
from ootest.config.relay_policy import RelayPolicy, relay_var
from ootest.config.resolved import Config, ResolvedFile
from ootest.config.when import Context, holds
from ootest.errors import ConfigError, Problem

# libyaml's C loader when available: a 10,000-entry config loads in well under a second.
_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SCALAR, _SEQUENCE = yaml.ScalarNode, yaml.SequenceNode


class _Loader(_Base):  # type: ignore[misc]
    """The safe loader, lighter for the composer's calls into Python (one or more per
    node): no path resolvers (it asks them about every collection; configs use
    none), and every node resolved in one frame, as BaseResolver.resolve does when
    there are neither path nor wildcard resolvers (checked below)."""

    # Called by the composer around every node, results unused: builtins that take
    # the same arguments and do nothing, as class attributes (builtins do not bind
    # to the instance), cost no Python frame: 1.2 million calls for 100,000 entries.
    descend_resolver = operator.is_
    ascend_resolver = tuple

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        # 600,000 calls for 100,000 entries (a PyYAML unlike the one we know: see below)
        if kind is _SCALAR:
            if implicit[0]:
                for tag, regexp in _IMPLICIT.get(value[:1], ()):
                    if regexp.match(value):
                        return tag
            return "tag:yaml.org,2002:str"
        if kind is _SEQUENCE:
            return "tag:yaml.org,2002:seq"
        return "tag:yaml.org,2002:map"


_IMPLICIT: dict[str, list[tuple[str, Any]]] = _Base.yaml_implicit_resolvers
if None in _IMPLICIT or _Base.yaml_path_resolvers:  # a PyYAML unlike the one we know
    del _Loader.resolve


Loc = tuple[int | str, ...]

# Note [GC-light config]
# A config is loaded before torch is imported and stays alive while the test
# modules are: every full pass of the cyclic GC (a dozen while torch and op_db
# load) walks it again. So the structures kept per entry hold few container
# objects: names, tags and labels are tuples (a tuple of strings is untracked
# after one pass), NamePattern has slots (one object, not two), and the YAML
# node tree is dropped after loading. 10,000 entries: 90k tracked objects
# before, 67k now.

# Note [Config bounds]
# A config can come from anyone who opens a pull request, so reading one stays
# bounded whatever it holds; each bound is checked before the work that grows with it:
# - bytes (OOTEST_CONFIG_MAX_BYTES), before decoding: libyaml's parsing and composing
#   are linear in them;
# - values once aliases are expanded (OOTEST_CONFIG_MAX_NODES), nesting depth
#   (MAX_DEPTH) and recursive aliases. libyaml composes an alias as a shared node,
#   so the node graph is linear in the bytes; _construct builds each shared node
#   once (a memo), adds up what it stands for, and stops at the bound before anything
#   walks the data as a tree (the duplicate-key check and pydantic do: a 489-byte
#   file with 7 levels of nine-fold aliases took 17 s). Documents left to PyYAML's
#   constructor (merge keys, tags) are counted first by _check_tree, same bounds;
# - files and folders a `files[].path` glob reads (OOTEST_CONFIG_MAX_GLOB), and the
#   folder it searches must lie inside the config's folder or the ${VAR} it starts with;
# - name patterns are matched in linear time (Note [Linear-time names] in names.py).
MAX_BYTES = ("OOTEST_CONFIG_MAX_BYTES", 16 * 1024 * 1024)
MAX_NODES = ("OOTEST_CONFIG_MAX_NODES", 4_000_000)
MAX_DEPTH = 64


def _limit(name: str, default: int) -> int:
    try:
        return paths.env_limit(name, default)
    except ValueError as e:
        raise ConfigError([Problem(name, 0, 0, "", str(e).removeprefix(name + ": "))]) from None


_norm = paths.norm


# ----------------------------------------------------------------- positions
def _child(node: Any, part: int | str) -> tuple[Any, Any] | None:
    """(key node or None, value node) of ``part`` under a composed YAML node."""
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == str(part):
                return k, v
    elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
        if 0 <= part < len(node.value):
            return None, node.value[part]
    return None


def _position(root: Any, loc: Loc, *, key: bool = False) -> tuple[int, int]:
    """1-based (line, col) of the node at ``loc``; the deepest known node on failure."""
    node = root
    best = (1, 1)
    for part in loc:
        found = _child(node, part)
        if found is None and isinstance(part, int) and isinstance(node, yaml.MappingNode):
            continue  # one item written where a list is taken (forward_inputs: {args: ...})
        if found is None:
            break
        knode, node = found
        use_key = knode is not None and (key or not isinstance(node, yaml.ScalarNode))
        mark = (knode if use_key else node).start_mark
        best = (mark.line + 1, mark.column + 1)
    return best


def _duplicate_keys(
    path: Path, node: Any, trail: Loc = (), done: set[int] | None = None
) -> list[Problem]:
    """YAML loaders keep the last of two equal keys silently; we refuse them.

    Each node is looked at once, however many aliases share it (Note [Config bounds])."""
    out: list[Problem] = []
    done = set() if done is None else done
    if id(node) in done:
        return out
    done.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for k, v in node.value:
            name = str(k.value)
            if name in seen:
                out.append(
                    Problem(
                        str(path),
                        k.start_mark.line + 1,
                        k.start_mark.column + 1,
                        _key_path((*trail, name)),
                        f"duplicate key {name!r} (first at line {seen[name]}); keep one",
                    )
                )
            else:
                seen[name] = k.start_mark.line + 1
            out += _duplicate_keys(path, v, (*trail, name), done)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            out += _duplicate_keys(path, v, (*trail, i), done)
    return out


class _Bound(Exception):
    """A bound of Note [Config bounds] was crossed at ``child``; :meth:`up` adds the
    key or index of each enclosing collection on the way out."""

    def __init__(self, message: str, child: Any, shared: bool = False) -> None:
        self.message = message
        self.child = child
        self.loc: list[int | str] = []
        self.shared = shared  # at a node met before: shown at its parent, not its anchor

    def up(self, parent: Any) -> None:
        """Called by ``parent``, the collection holding :attr:`child` (error path only)."""
        child = self.child
        if isinstance(parent, yaml.MappingNode):
            part = next(
                (str(k.value) if isinstance(k, yaml.ScalarNode) else "?")
                for k, v in parent.value
                if child is k or child is v
            )
            self.loc.append(part)
        elif self.shared and not self.loc:
            # a list holding one node several times: which alias crossed is not known,
            # so the problem is shown at the list
            self.shared = False
        else:
            self.loc.append(next(i for i, v in enumerate(parent.value) if v is child))
        self.child = parent

    def problem(self, path: Path, root: Any) -> ConfigError:
        loc = tuple(reversed(self.loc))
        line, col = _position(root, loc[:-1] if self.shared else loc)
        return ConfigError([Problem(str(path), line, col, _key_path(loc), self.message)])


def _too_many(limit: int, total: int, node: Any, shared: bool = False) -> _Bound:
    return _Bound(
        f"expected at most {limit:,} values once YAML aliases are expanded; found "
        f"{total:,} by here. Write the values out, or raise the limit with {MAX_NODES[0]}=<n>",
        node,
        shared,
    )


def _too_deep(node: Any) -> _Bound:
    return _Bound(
        f"expected at most {MAX_DEPTH} levels of nesting; found deeper nesting here", node
    )


def _recursive(node: Any) -> _Bound:
    return _Bound(
        "expected a tree of values; found an alias inside the value it names "
        "(a recursive structure). Remove the alias",
        node,
        shared=True,
    )


def _check_tree(root: Any, limit: int) -> None:
    """The bounds :func:`_construct` enforces while it builds, for documents it
    leaves to PyYAML's constructor (merge keys, tags): checked before that
    constructor expands anything. One visit per composed node (the memo)."""
    sizes: dict[int, int] = {}  # expanded size of each collection node; -1 while open
    total = 0
    scalar = yaml.ScalarNode

    def walk(node: Any, depth: int) -> None:
        nonlocal total
        size = sizes.get(id(node))
        if size is not None:
            if size < 0:
                raise _recursive(node)
            total += size
            if total > limit:
                raise _too_many(limit, total, node, shared=True)
            return
        if depth > MAX_DEPTH:
            raise _too_deep(node)
        sizes[id(node)] = -1
        start = total
        total += 1
        if isinstance(node, yaml.MappingNode):
            children = [c for pair in node.value for c in pair]
        else:
            children = list(node.value)
        try:
            for child in children:
                if child.__class__ is scalar:
                    total += 1
                else:
                    walk(child, depth + 1)
        except _Bound as e:
            e.up(node)
            raise
        if total > limit:
            raise _too_many(limit, total, node)
        sizes[id(node)] = total - start

    if root.__class__ is not scalar:
        walk(root, 1)


def _key_path(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


# --------------------------------------------------- schema walk for messages
def _model_at(loc: Loc, root: type[BaseModel] = Document) -> type[BaseModel] | None:
    """The pydantic model that owns the mapping at ``loc`` (for 'expected keys')."""
    model: Any = root
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
        fld = next(
            (f for n, f in model.model_fields.items() if (f.alias or n) == part),
            None,
        )
        if fld is None:
            return None
        model = _unwrap(fld.annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _unwrap(tp: Any) -> Any:
    while True:
        origin = typing.get_origin(tp)
        if origin in (list, typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
            if models:
                tp = models[0]
                continue
            lists = [a for a in args if typing.get_origin(a) is list]
            if lists:
                tp = lists[0]
                continue
            return args[0] if args else tp
        if origin is dict:
            return typing.get_args(tp)[1]
        return tp


def _yaml_type(v: Any) -> str:
    if isinstance(v, dict):
        return "a mapping"
    if isinstance(v, list):
        return "a list"
    if v is None:
        return "nothing (null)"
    if isinstance(v, bool):
        return f"a boolean ({v})"
    if isinstance(v, int | float):
        return f"a number ({v})"
    text = str(v)
    if len(text) > _EXCERPT:
        # never echo a whole file (extends: /etc/passwd): a short excerpt only
        return f"text of {len(text):,} characters starting {text[:_EXCERPT]!r}"
    return f"{v!r}"


_EXCERPT = 40  # characters of a found value an error message may quote


def _shape(v: Any) -> str:
    """What a file that is not a config holds, quoting none of it: it may be any
    file (``extends: /etc/shadow``, a ``.env``; Note [Extends roots])."""
    if isinstance(v, dict):
        return f"a mapping of {len(v):,} keys"
    if isinstance(v, list):
        return "a list"
    if v is None:
        return "nothing (null)"
    if isinstance(v, bool | int | float):
        return "a single value"
    return f"text of {len(str(v)):,} characters (not shown: it is not a config)"


def _describe(err: Any, loc: Loc, root: type[BaseModel] = Document) -> str:
    typ = err["type"]
    found = err.get("input")
    if typ == "extra_forbidden":
        name = str(loc[-1])
        model = _model_at(loc[:-1], root)
        allowed = sorted((f.alias or n) for n, f in model.model_fields.items()) if model else []
        hint = difflib.get_close_matches(name, allowed, n=1)
        msg = f"unknown key {name!r}"
        if allowed:
            msg += f"; expected one of: {', '.join(allowed)}"
        if hint:
            msg += f". Did you mean {hint[0]!r}?"
        return msg
    if typ == "missing":
        return f"missing required key {loc[-1]!r}"
    if typ == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        msg = f"expected one of {expected}; found {_yaml_type(found)}"
        if isinstance(found, str):
            hint = difflib.get_close_matches(found, MODES, n=1)
            if hint:
                msg += f". Did you mean {hint[0]!r}?"
        return msg
    if typ in ("list_type", "tuple_type", "too_short"):
        if typ == "too_short":
            return f"expected a non-empty list; found {_yaml_type(found)}"
        return f"expected a list; found {_yaml_type(found)}"
    if typ in ("model_type", "model_attributes_type", "dict_type"):
        return f"expected a mapping; found {_yaml_type(found)}"
    if typ == "string_type":
        return f"expected a string; found {_yaml_type(found)}"
    if typ in ("bool_type", "bool_parsing"):
        return f"expected true or false; found {_yaml_type(found)}"
    if typ in ("float_type", "float_parsing", "int_type", "int_parsing"):
        return f"expected a number; found {_yaml_type(found)}"
    if typ == "finite_number":
        return f"expected a finite number; found {found!r}"
    if typ in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return f"expected a number {err['msg'].split('should be ', 1)[-1]}; found {found!r}"
    if typ == "value_error":
        return str(err["msg"]).removeprefix("Value error, ")
    return f"{err['msg']}; found {_yaml_type(found)}"


# ----------------------------------------------------------------- read YAML
def _decode(path: Path, raw: bytes) -> str:
    """The text of a config: UTF-8 (a byte order mark is dropped), no NUL bytes."""

    def where(offset: int, message: str) -> ConfigError:
        head = raw[:offset]
        line = head.count(b"\n") + 1
        col = len(head[head.rfind(b"\n") + 1 :].decode("utf-8", "replace")) + 1
        return ConfigError([Problem(str(path), line, col, "", message)])

    for bom, name in (
        (codecs.BOM_UTF32_LE, "UTF-32"),
        (codecs.BOM_UTF32_BE, "UTF-32"),
        (codecs.BOM_UTF16_LE, "UTF-16"),
        (codecs.BOM_UTF16_BE, "UTF-16"),
    ):
        if raw.startswith(bom):
            raise where(0, f"expected UTF-8 text; found a {name} byte order mark. {_AS_UTF8}")
    nul = raw.find(b"\0")
    if nul >= 0:
        if raw.count(b"\0") * 3 >= len(raw):  # every other byte: UTF-16 (or 3 of 4: UTF-32)
            raise where(
                nul,
                f"expected text; found a NUL byte (UTF-16 without a byte order mark?). {_AS_UTF8}",
            )
        raise where(nul, "expected text; found a NUL byte. Remove it (is this a binary file?)")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise where(
            e.start, f"expected UTF-8 text; found the byte 0x{raw[e.start]:02x}. {_AS_UTF8}"
        ) from None


_AS_UTF8 = "Save the file as UTF-8"


def _read_bytes(path: Path) -> bytes:
    """The bytes of a config file, within the byte bound (Note [Config bounds])."""
    limit = _limit(*MAX_BYTES)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(limit + 1)
            size = os.fstat(fh.fileno()).st_size
    except FileNotFoundError:
        raise ConfigError(
            [Problem(str(path), 0, 0, "", "config file not found; check the path")]
        ) from None
    except OSError as e:
        raise ConfigError([Problem(str(path), 0, 0, "", f"cannot read: {e.strerror}")]) from None
    if len(raw) > limit:
        raise ConfigError(
            [
                Problem(
                    str(path),
                    0,
                    0,
                    "",
                    f"expected a config file of at most {limit:,} bytes; found "
                    f"{max(size, len(raw)):,}. Split it with extends:, or raise the limit "
                    f"with {MAX_BYTES[0]}=<n>",
                )
            ]
        )
    return raw


def _parse(path: Path, raw: bytes) -> tuple[Any, Any]:
    """(data, composed node tree); the node tree gives every value's line and column."""
    loader = _Loader(_decode(path, raw))
    dups = False
    try:
        node = loader.get_single_node()
        nodes = _limit(*MAX_NODES)
        try:
            aliases = b"&" in raw  # an alias needs an anchor
            data, dups = (
                _construct(loader, node, nodes, aliases) if node is not None else (None, False)
            )
        except _Unusual:  # merge keys, tags, complex keys: PyYAML's own constructor
            _check_tree(node, nodes)
            data, dups = loader.construct_document(node), True
    except _Bound as e:
        raise e.problem(path, node) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        what = (e.problem or "invalid YAML").strip()
        raise ConfigError(
            [Problem(str(path), line, col, "", f"YAML syntax error: {what}; fix the syntax")]
        ) from None
    except yaml.YAMLError as e:  # the reader's: a character YAML does not allow
        what = str(getattr(e, "reason", "") or "invalid YAML").strip()
        raise ConfigError(
            [Problem(str(path), 0, 0, "", f"YAML syntax error: {what}; fix the file")]
        ) from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise ConfigError(
            [
                Problem(
                    str(path),
                    1,
                    1,
                    "",
                    f"expected a mapping with key 'test_suite_config'; found {_shape(data)}",
                )
            ]
        )
    if dups and (found := _duplicate_keys(path, node)):
        raise ConfigError(found)
    return data, node


# Note [Config cache]
# Most of reading a big config is PyYAML composing its node tree (100,000 entries:
# about half of load_config), and what that gives -- the data (plain values) and the
# lines of its entries (Origins) -- depends only on the file's bytes. So for a file of
# CACHE_MIN_BYTES or more both are kept in $OOTEST_CACHE_DIR/configs/, named by the
# SHA-256 of the bytes and of what else they depend on (this reader's code, PyYAML,
# the node bound, Python's marshal format). A rerun reads them back instead and goes
# on as a first load does: validation, names, ${VAR}, paths, with today's
# environment; a problem found then is reported from the file, composed for it. Only
# a file that loaded without problems is kept (marshal: plain data only, nothing
# executable); OOTEST_NO_CACHE=1 turns it off; entries unused for 30 days are dropped.
CACHE_MIN_BYTES = 256 * 1024
_CACHE_FORMAT = 1
_CACHE_DAYS = 30


class _Tree:
    """A config's node tree, composed when a position is first asked for: one read
    from the cache (Note [Config cache]) is composed only to report a problem."""

    def __init__(
        self,
        path: Path,
        raw: bytes,
        node: Any = None,
        origins: Origins | None = None,
        store: tuple[Path, bytes] | None = None,
    ) -> None:
        self.path = path
        self.raw = raw
        self._node = node
        self.origins = origins
        self._store = store  # (cache file, data as read) to keep once it validates

    @property
    def node(self) -> Any:
        if self._node is None:
            self._node = _parse(self.path, self.raw)[1]
        return self._node

    def keep(self) -> None:
        """Keep the data and origins of a config that loaded (a failure only costs
        the cache)."""
        if self._store is None or self.origins is None:
            return
        file, blob = self._store
        self._store = None
        with contextlib.suppress(OSError, ValueError):
            write_atomic(file, marshal.dumps((_CACHE_FORMAT, blob, self.origins)))
            old = time.time() - _CACHE_DAYS * 86400
            for entry in os.scandir(file.parent):
                with contextlib.suppress(OSError):
                    if entry.stat().st_mtime < old:
                        os.unlink(entry.path)


def _cache_file(raw: bytes) -> Path | None:
    """Where the cache keeps what ``raw`` gives; None when it is not kept."""
    if len(raw) < CACHE_MIN_BYTES or os.environ.get("OOTEST_NO_CACHE", "") not in ("", "0"):
        return None
    try:
        nodes = _limit(*MAX_NODES)  # a bad value is reported where it always was
    except ConfigError:
        return None
    code = []
    for source in _READER_CODE:
        try:
            st = os.stat(source or "")
        except OSError:  # sources not on disk (a zip): nothing to key on
            return None
        code.append((st.st_mtime_ns, st.st_size))
    key = hashlib.sha256(raw)
    stamp = (_CACHE_FORMAT, code, yaml.__version__, _Base.__name__, nodes, MAX_DEPTH)
    key.update(repr((stamp, marshal.version, sys.version_info[:2])).encode())
    return cache_dir() / "configs" / f"{key.hexdigest()}.marshal"


_READER_CODE = (__file__, sys.modules[Document.__module__].__file__)


def _cached(file: Path) -> tuple[Any, Origins] | None:
    """(data, origins) kept for ``file``, if any."""
    try:
        with open(file, "rb") as fh:
            fmt, blob, origins = marshal.load(fh)
        data = marshal.loads(blob) if fmt == _CACHE_FORMAT else None
        os.utime(file)  # used: not dropped (Note [Config cache])
    except (OSError, ValueError, EOFError, TypeError):
        return None
    if not isinstance(data, dict) or not isinstance(origins, tuple) or len(origins) != 3:
        return None
    return data, origins


def _read(path: Path) -> tuple[Any, _Tree]:
    """(data, node tree) of a config file, from the cache when it holds them."""
    raw = _read_bytes(path)
    file = _cache_file(raw)
    hit = _cached(file) if file is not None else None
    if hit is not None:
        return hit[0], _Tree(path, raw, origins=hit[1])
    data, node = _parse(path, raw)
    store = None
    if file is not None:
        with contextlib.suppress(ValueError):  # not plain data (a timestamp): not kept
            store = (file, marshal.dumps(data))
    return data, _Tree(path, raw, node, store=store)


_STR = "tag:yaml.org,2002:str"
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"


class _Unusual(Exception):
    """A node the fast builder leaves to PyYAML's constructor."""


def _construct(loader: Any, root: Any, limit: int, aliases: bool = True) -> tuple[Any, bool]:
    """(data, whether some mapping repeats a key) of a composed document, within
    the bounds of Note [Config bounds] (``limit`` values once aliases are expanded).

    The same values as ``loader.construct_document``, built by one tight walk:
    plain strings, lists and dicts (nearly all of a config) directly, other
    scalars (ints, bools, nulls, ...) by PyYAML's resolver-driven constructors.
    About three times faster on a 10,000-entry config. Anything unusual (merge
    keys, explicit tags, complex keys) raises :class:`_Unusual`. ``aliases=False``
    (the file has no ``&``, so no anchor) skips what only aliases need: the memo of
    shared nodes, and lists of strings are built in one comprehension.
    """
    # aliases share their node: build each once; (value, expanded size), -1 while open
    memo: dict[int, tuple[Any, int]] = {}
    dup = False
    count = 0  # values so far, aliases expanded
    scalar, sequence, mapping = yaml.ScalarNode, yaml.SequenceNode, yaml.MappingNode

    def build(node: Any, depth: int) -> Any:
        nonlocal dup, count
        kind = node.__class__
        if kind is scalar:
            count += 1
            return node.value if node.tag == _STR else loader.construct_object(node, deep=True)
        done = memo.get(id(node)) if aliases else None
        if done is not None:
            if done[1] < 0:
                raise _recursive(node)
            count += done[1]
            if count > limit:
                raise _too_many(limit, count, node, shared=True)
            return done[0]
        if depth > MAX_DEPTH:
            raise _too_deep(node)
        start = count
        count += 1
        value: Any
        if kind is sequence and node.tag == _SEQ:
            value = []
            if aliases:
                memo[id(node)] = value, -1
            append = value.append
            try:
                for v in node.value:
                    # plain strings, most of a config, without a call each
                    if v.__class__ is scalar and v.tag == _STR:
                        count += 1
                        append(v.value)
                    else:
                        append(build(v, depth + 1))
            except _Bound as e:
                e.up(node)
                raise
        elif kind is mapping and node.tag == _MAP:
            value = {}
            if aliases:
                memo[id(node)] = value, -1
            for k, v in node.value:
                if k.__class__ is not scalar or k.tag not in (_STR, _INT, _BOOL, _NULL):
                    raise _Unusual
                key = k.value if k.tag == _STR else loader.construct_object(k)
                if key in value:
                    dup = True
                count += 1
                if v.__class__ is scalar and v.tag == _STR:
                    count += 1
                    value[key] = v.value
                    continue
                if not aliases and v.__class__ is sequence and v.tag == _SEQ and depth < MAX_DEPTH:
                    items = v.value  # `names:` lists, most of a big config
                    strings = [x.value for x in items if x.__class__ is scalar and x.tag == _STR]
                    if len(strings) == len(items) and count + len(items) < limit:
                        count += len(strings) + 1
                        value[key] = strings
                        continue
                try:
                    value[key] = build(v, depth + 1)
                except _Bound as e:
                    e.up(node)
                    raise
        else:
            raise _Unusual
        if count > limit:
            raise _too_many(limit, count, node)
        if aliases:
            memo[id(node)] = value, count - start
        return value

    return build(root, 1), dup


_INT = "tag:yaml.org,2002:int"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"


def _problems(path: Path, node: Any, e: ValidationError, root: type[BaseModel]) -> list[Problem]:
    problems = []
    for err in e.errors():
        loc: Loc = tuple(err["loc"])
        # pydantic reports union members and 'function-before' steps in loc; drop them.
        loc = tuple(p for p in loc if not (isinstance(p, str) and "[" in p))
        line, col = _position(node, loc, key=err["type"] == "extra_forbidden")
        problems.append(Problem(str(path), line, col, _key_path(loc), _describe(err, loc, root)))
    return problems


def _expand_relay(
    path: Path, tree: _Tree, data: Any, env: dict[str, str]
) -> tuple[list[Problem], dict[str, Any]]:
    """``${VAR}`` in the strings of ``relay:`` (and its lists), before validation:
    only the variables of Note [Relay variables]. Returns the problems and, for
    each field the environment gave, what was written."""
    relay = data.get("relay")
    if not isinstance(relay, dict):
        return [], {}
    problems: list[Problem] = []
    written: dict[str, Any] = {}

    def expand(value: Any, loc: Loc) -> Any:
        if isinstance(value, list):
            items = [expand(v, (*loc, i)) for i, v in enumerate(value)]
            # a list with an item left out is left out: only the variable is reported
            lost = any(x is None and v is not None for x, v in zip(items, value, strict=True))
            return None if lost else items
        if not isinstance(value, str) or "${" not in value:
            return value
        refused = [n for n in paths.VAR.findall(value) if paths.IDENT.match(n) and not relay_var(n)]
        text, missing = paths.expand(value, {k: v for k, v in env.items() if relay_var(k)})
        for name in missing:
            if not paths.IDENT.match(name):
                msg = f"expected a variable name in ${{...}}; found {name!r}"
            elif name in refused:
                msg = (
                    f"expected a variable meant for relay: (OOTEST_DEVICE or OOTEST_RELAY_*); "
                    f"found ${{{name}}}. Write the value, or export it under a name "
                    "starting OOTEST_RELAY_"
                )
            else:
                msg = f"undefined variable ${{{name}}}; export {name}=... or remove it"
            line, col = _position(tree.node, loc)
            problems.append(Problem(str(path), line, col, _key_path(loc), msg))
        if missing:
            return None  # left out when a variable is missing: only the variable is reported
        written[str(loc[1])] = relay[loc[1]]
        return text

    out = {k: expand(v, ("relay", k)) for k, v in relay.items()}
    data["relay"] = {k: v for k, v in out.items() if v is not None or relay[k] is None}
    return problems, written


def _hide_env(problems: list[Problem], written: dict[str, Any]) -> list[Problem]:
    """Problems of relay fields the environment gave, saying what was written
    instead of what was found (Note [Relay variables])."""
    out = []
    for p in problems:
        field = p.key_path.split(".")[1].split("[")[0] if p.key_path.startswith("relay.") else ""
        if field in written:
            head, sep, _ = p.message.partition("found ")
            if sep:
                p = dataclasses.replace(
                    p,
                    message=f"{head}found the value of {written[field]} (not shown: it comes "
                    "from the environment)",
                )
        out.append(p)
    return out


def _compile_names(
    path: Path, tree: _Tree, suite: TestSuiteConfig
) -> tuple[dict[int, tuple[NamePattern, ...]], list[Problem]]:
    """Every test entry's names compiled (by ``id`` of the entry), and the problems
    with ``file:line:col`` and the full key path."""
    compiled: dict[int, tuple[NamePattern, ...]] = {}
    problems: list[Problem] = []
    parse = NamePattern.parse
    for i, f in enumerate(suite.files):
        for j, t in enumerate(f.tests):
            try:
                compiled[id(t)] = tuple([parse(name) for name in t.names])
                continue
            except NameSyntaxError:
                pass
            names = []
            for k, name in enumerate(t.names):
                try:
                    names.append(parse(name))
                except NameSyntaxError as e:
                    loc = ("test_suite_config", "files", i, "tests", j, "names", k)
                    line, col = _position(tree.node, loc)
                    problems.append(Problem(str(path), line, col, _key_path(loc), str(e)))
            compiled[id(t)] = tuple(names)
    return compiled, problems


def _validate(
    path: Path, data: Any, tree: _Tree, env: dict[str, str] | None = None
) -> tuple[Document, dict[int, tuple[NamePattern, ...]]]:
    problems, from_env = _expand_relay(path, tree, data, dict(os.environ) if env is None else env)
    cases: CasesDocument | None = None
    if "cases" in data:
        # Torch Spyre's model-case files: top-level model/default(s)/cases, checked on
        # their own; what else the file holds is a config as usual.
        try:
            cases = CasesDocument.model_validate({k: data[k] for k in CASES_KEYS if k in data})
        except ValidationError as e:
            problems += _problems(path, tree.node, e, CasesDocument)
        data = {k: v for k, v in data.items() if k not in CASES_KEYS}
        if not data:
            data = {"test_suite_config": {}}
    try:
        doc = Document.model_validate(data)
    except ValidationError as e:
        problems += _hide_env(_problems(path, tree.node, e, Document), from_env)
    if problems:
        raise ConfigError(problems) from None
    if doc.relay is not None:
        doc.relay._from_env = from_env
    compiled, problems = _compile_names(path, tree, doc.test_suite_config)
    if problems:
        raise ConfigError(problems)
    doc._cases = cases
    if tree.origins is not None:
        with contextlib.suppress(TypeError, ValueError):  # else a cache entry of another shape
            _attach_origins(path, doc, tree.origins)
            return doc, compiled
    tree.origins = _origin_table(tree.node, doc)
    tree.keep()
    _attach_origins(path, doc, tree.origins)
    return doc, compiled


Origins = tuple[Any, ...]
"""Where the entries of a document were written, as plain data (it is cached, Note
[Config cache]): (test_selectors lines, per file (line, path line, path column, per
test entry its line or (line, selectors lines, declared ops' lines, declared modules'
lines)), lines of global's supported_dtypes, supported_ops, supported_modules). Lines
of selectors are (include lines, exclude lines)."""


def _origin_table(node: Any, doc: Document) -> Origins:
    """The lines :func:`_attach_origins` records, found in the node tree (where
    the validated document has something to mark)."""

    def items(parent: Any, key: str) -> list[Any]:
        found = _child(parent, key) if parent is not None else None
        value = found[1] if found else None
        return list(value.value) if isinstance(value, yaml.SequenceNode) else []

    def lines(nodes: list[Any]) -> list[int]:
        return [n.start_mark.line + 1 for n in nodes]

    def selectors(block: Selectors | None, parent: Any, key: str) -> Any:
        found = _child(parent, key) if block is not None and parent is not None else None
        if not found:
            return None
        return lines(items(found[1], "include")), lines(items(found[1], "exclude"))

    found = _child(node, "test_suite_config")
    top = found[1] if found else None
    suite = doc.test_suite_config
    files = []
    for i, (f, fnode) in enumerate(zip(suite.files, items(top, "files"), strict=False)):
        line, col = _position(node, ("test_suite_config", "files", i, "path"))
        tests: list[Any] = []
        for t, tnode in zip(f.tests, items(fnode, "tests"), strict=False):
            tline = tnode.start_mark.line + 1
            if t.selectors is None and t.edits is None:
                tests.append(tline)
                continue
            refs: list[Any] = [None, None]
            found = _child(tnode, "edits") if t.edits is not None else None
            enode = found[1] if found else None
            for k, axis in enumerate(("ops", "modules")):
                edit = getattr(t.edits, axis, None) if t.edits else None
                found = _child(enode, axis) if enode is not None else None
                if edit is not None and found is not None:
                    refs[k] = lines(items(found[1], "include"))
            tests.append((tline, selectors(t.selectors, tnode, "selectors"), *refs))
        files.append((fnode.start_mark.line + 1, line, col, tests))
    gfound = _child(top, "global") if top is not None else None
    gnode = gfound[1] if gfound else None
    caps = tuple(
        lines(items(gnode, key)) if getattr(suite.global_, key) else []
        for key in ("supported_dtypes", "supported_ops", "supported_modules")
    )
    return selectors(suite.test_selectors, top, "test_selectors"), files, caps


def _attach_origins(path: Path, doc: Document, table: Origins) -> None:
    """Record ``file:line`` on every file, test entry and capability (for messages),
    as loader-set attributes (Note [Loader-set attributes] in model.py)."""
    at = f"{path}:"

    def mark(models: Any, lines: list[int] | None) -> None:
        for model, line in zip(models or (), lines or (), strict=False):
            set_private(model, "_origin", at + str(line))

    def selectors(block: Selectors | None, lines: Any) -> None:
        if block is not None and lines is not None:
            mark(block.include, lines[0])
            mark(block.exclude, lines[1])

    sel, files, caps = table
    suite = doc.test_suite_config
    selectors(suite.test_selectors, sel)
    for i, (f, (fline, line, col, tests)) in enumerate(zip(suite.files, files, strict=False)):
        set_private(f, "_origin", at + str(fline))
        where = (f.path, str(path), line, col, f"test_suite_config.files[{i}].path")
        set_private(f, "_path_at", where)
        for t, entry in zip(f.tests, tests, strict=False):
            if entry.__class__ is int:
                set_private(t, "_origin", at + str(entry))
                continue
            tline, tsel, ops, modules = entry
            set_private(t, "_origin", at + str(tline))
            selectors(t.selectors, tsel)
            if t.edits is not None:
                mark(t.edits.ops.include if t.edits.ops else None, ops)
                mark(t.edits.modules.include if t.edits.modules else None, modules)
    g = suite.global_
    keys = ("supported_dtypes", "supported_ops", "supported_modules")
    for key, lines in zip(keys, caps, strict=True):
        mark(getattr(g, key), lines)


# --------------------------------------------------------------- composition
def _merge_named(base: list[Any] | None, child: list[Any] | None) -> list[Any] | None:
    if base is None:
        return child
    if child is None:
        return base
    merged = {ref.name: ref for ref in base}
    merged.update({ref.name: ref for ref in child})
    return list(merged.values())


def _compose(base: TestSuiteConfig, child: TestSuiteConfig) -> TestSuiteConfig:
    g = GlobalCaps(
        supported_dtypes=_merge_named(
            base.global_.supported_dtypes, child.global_.supported_dtypes
        ),
        supported_ops=_merge_named(base.global_.supported_ops, child.global_.supported_ops),
        supported_modules=_merge_named(
            base.global_.supported_modules, child.global_.supported_modules
        ),
        input_config=child.global_.input_config or base.global_.input_config,
    )
    return TestSuiteConfig(
        extends=[],
        device=child.device or base.device,
        labels=list(dict.fromkeys([*base.labels, *child.labels])),
        files=[*base.files, *child.files],
        **{"global": g},
        timeout=child.timeout if child.timeout is not None else base.timeout,
        test_selectors=child.test_selectors or base.test_selectors,
        op_map=child.op_map or base.op_map,
    )


@dataclass
class _Loaded:
    """What reading a config and everything it extends gives."""

    suite: TestSuiteConfig
    doc: Document  # the config's own document
    relay: RelayPolicy | None  # its own, else the last one it extends that has one
    names: dict[int, tuple[NamePattern, ...]]  # compiled names by id() of test entry
    sources: list[Path]


def _load_doc(
    path: Path,
    stack: tuple[str, ...],
    sources: list[Path],
    env: dict[str, str] | None,
    names: dict[int, tuple[NamePattern, ...]],
    roots: paths.ExtendsRoots,
) -> tuple[TestSuiteConfig, Document, RelayPolicy | None]:
    sources.append(path)
    data, tree = _read(path)
    if len(stack) > 1 and not (isinstance(data, dict) and "test_suite_config" in data):
        # an extended file that is not a config: say so, show none of it
        raise ConfigError(
            [
                Problem(
                    str(path),
                    1,
                    1,
                    "",
                    "expected a config (a mapping with key 'test_suite_config'); found "
                    f"{_shape(data)} without it (not shown: it is not a config). Extend only "
                    "ootest configs",
                )
            ]
        )
    doc, compiled = _validate(path, data, tree, env)
    names.update(compiled)
    relay = doc.relay
    suite = doc.test_suite_config
    # File paths are relative to the config that declares them.
    for f in suite.files:
        if not f.path.startswith("${") and not os.path.isabs(f.path):
            f.path = str(path.parent / f.path)
    if suite.op_map is not None and not os.path.isabs(suite.op_map):
        suite.op_map = str(path.parent / suite.op_map)
    composed: TestSuiteConfig | None = None
    inherited: RelayPolicy | None = None
    for i, ext in enumerate(suite.extends):
        target = (path.parent / ext).resolve()
        if _norm(target) in stack:
            line, col = _position(tree.node, ("test_suite_config", "extends", i))
            chain = " -> ".join([*stack, _norm(target)])
            raise ConfigError(
                [
                    Problem(
                        str(path),
                        line,
                        col,
                        f"test_suite_config.extends[{i}]",
                        f"circular extends: {chain}; remove one of the links",
                    )
                ]
            )
        refused = roots.refusal(path, target)
        if refused is not None:
            line, col = _position(tree.node, ("test_suite_config", "extends", i))
            key = f"test_suite_config.extends[{i}]"
            raise ConfigError([Problem(str(path), line, col, key, refused)])
        if not target.is_file():
            line, col = _position(tree.node, ("test_suite_config", "extends", i))
            raise ConfigError(
                [
                    Problem(
                        str(path),
                        line,
                        col,
                        f"test_suite_config.extends[{i}]",
                        f"expected an existing config file; found no file at {target}",
                    )
                ]
            )
        if _norm(target) in {_norm(s.resolve()) for s in sources}:
            # reached along another path already (a diamond): applied once, where first
            # reached; read again, a chain of diamonds cost 2**n (issue 28 item 15)
            continue
        base, _, base_relay = _load_doc(target, (*stack, _norm(target)), sources, env, names, roots)
        composed = base if composed is None else _compose(composed, base)
        inherited = base_relay or inherited
    if composed is not None:
        suite = _compose(composed, suite)
    return suite, doc, relay or inherited


# Fields of model-derived entries that ootest accepts but does not apply: one note
# per field and config, however many entries use it (Note [Model call specs]).
_NOT_APPLIED = {
    "device_layout": "Torch Spyre's device layout of a tensor: accepted, not applied "
    "(ootest creates the declared shape, stride and storage offset)",
    "preset": "tensor presets: accepted, not applied",
    "init: file": "tensors loaded from files: accepted, not run (those variants are skipped)",
    "sample_inputs_func": "on a module entry: accepted, not used (a module entry's calls "
    "are its forward_inputs)",
    "kwargs": "keyword arguments beside sample_inputs_func: used as the call's kwargs "
    "(Torch Spyre's runner drops them; Note [Keyword arguments beside the call])",
}


def _model_notes(src: Path, suite: TestSuiteConfig, doc: Document) -> list[Problem]:
    """Notes on model-derived entries: fields accepted but not applied, and the
    devices their traces came from (mapped to the device under test)."""
    out: list[Problem] = []
    if doc.cases is not None:
        out.append(
            Problem(
                str(src),
                0,
                0,
                "cases",
                f"{len(doc.cases.cases)} model cases (Torch Spyre's model-case format): "
                "validated, not run; ootest runs model calls declared as edits.ops.include "
                "entries with sample_inputs_func (docs/model.md)",
            )
        )
    seen: dict[str, tuple[int, str, str]] = {}  # field -> (count, origin, key path)
    devices: dict[str, None] = {}

    def note(what: str, origin: str, key: str) -> None:
        n, first, path = seen.get(what, (0, origin, key))
        seen[what] = (n + 1, first, path)

    for i, f in enumerate(suite.files):
        for j, t in enumerate(f.tests):
            if t.edits is None:
                continue
            calls = []
            for k, op in enumerate(t.edits.ops.include if t.edits.ops else ()):
                if op.outer_kwargs:
                    key = f"files[{i}].tests[{j}].edits.ops.include[{k}].kwargs"
                    note("kwargs", op.origin or t.origin, key)
                if op.sample_inputs_func is not None:
                    where = f"files[{i}].tests[{j}].edits.ops.include[{k}].sample_inputs_func"
                    calls.append((op.origin or t.origin, where, op.sample_inputs_func))
            for k, mod in enumerate(t.edits.modules.include if t.edits.modules else ()):
                where = f"files[{i}].tests[{j}].edits.modules.include[{k}]"
                origin = mod.origin or t.origin
                if mod.sample_inputs_func is not None:
                    note("sample_inputs_func", origin, f"{where}.sample_inputs_func")
                if mod.constructor_inputs is not None:
                    calls.append((origin, f"{where}.constructor_inputs", mod.constructor_inputs))
                for m, fwd in enumerate(mod.forward_inputs or ()):
                    calls.append((origin, f"{where}.forward_inputs[{m}]", fwd))
            for origin, where, call in calls:
                for item, arg in call.items():
                    specs = [("tensor", arg.tensor)] if arg.tensor is not None else []
                    specs += [(f"tensor_list[{n}]", x) for n, x in enumerate(arg.tensor_list or ())]
                    for name, spec in specs:
                        key = f"{where}.{item}.{name}"
                        if spec.device is not None:
                            devices[spec.device] = None
                        if spec.device_layout is not None:
                            note("device_layout", origin, f"{key}.device_layout")
                        if spec.preset is not None:
                            note("preset", origin, f"{key}.preset")
                        if spec.init == "file":
                            note("init: file", origin, f"{key}.init")
    for what, (n, origin, key) in seen.items():
        file, _, line = origin.rpartition(":")
        many = f" ({n} times; the first is here)" if n > 1 else ""
        out.append(Problem(file or str(src), int(line or 0), 0, key, _NOT_APPLIED[what] + many))
    if devices:
        out.append(
            Problem(
                str(src),
                0,
                0,
                "",
                f"model entries were recorded on {', '.join(devices)}: ootest creates their "
                "tensors on the device under test (and maps device arguments other than 'cpu' "
                "to it)",
            )
        )
    return out


def _load(src: Path, env: dict[str, str] | None) -> _Loaded:
    sources: list[Path] = []
    names: dict[int, tuple[NamePattern, ...]] = {}
    with _no_gc():
        roots = paths.ExtendsRoots(src, env)
        suite, doc, relay = _load_doc(src, (_norm(src),), sources, env, names, roots)
    return _Loaded(suite, doc, relay, names, sources)


class _no_gc:
    """The cyclic GC paused while a config is read: loading allocates millions of
    objects (nodes, dicts, models) and none of them form cycles, yet every 700
    allocations start a collection that walks the young ones, and the older
    generations again and again: 100,000 entries composed in 4.4 s instead of 10."""

    def __enter__(self) -> None:
        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self.was:
            gc.enable()


def load_relay(path: str | os.PathLike[str], env: dict[str, str] | None = None) -> RelayPolicy:
    """The relay policy of a config (its ``relay:``, else the one it extends, else the
    defaults), read by the same loader as the rest: bounds, validation, ``extends``,
    ``${VAR}`` and ``file:line:col`` problems; test files are not looked for."""
    return _load(Path(path), env).relay or RelayPolicy()


def load_config(
    path: str | os.PathLike[str],
    *,
    env: dict[str, str] | None = None,
    check_paths: bool = True,
    ctx: Context | None = None,
) -> Config:
    """Load, validate, compose and expand a config file.

    Raises :class:`ConfigError` listing every problem found.
    """
    src = Path(path)
    loaded = _load(src, env)
    suite = loaded.suite
    environ = paths.environment(src, [f.path for f in suite.files], env)
    cfg = Config(source=src, suite=suite, relay=loaded.relay, sources=loaded.sources)
    glob_limit = _limit(*paths.GLOB_LIMIT)
    with _no_gc():
        _resolve(src, cfg, loaded, environ, check_paths, ctx, glob_limit)
    return cfg


def _resolve(
    src: Path,
    cfg: Config,
    loaded: _Loaded,
    environ: dict[str, str],
    check_paths: bool,
    ctx: Context | None,
    glob_limit: int,
) -> None:
    """Notes, test entries' compiled names and the test files of every file entry."""
    suite, doc = loaded.suite, loaded.doc
    problems: list[Problem] = []
    if suite.global_.devices is not None:
        cfg.warnings.append(
            Problem(
                str(src),
                0,
                0,
                "global.devices",
                "accepted for Torch Spyre compatibility and not used: the device comes from "
                "'device:' or --ootest-device",
            )
        )
    cfg.warnings += _model_notes(src, suite, doc)
    for i, f in enumerate(suite.files):
        where = f.origin or f"{src}:0"
        fname, _, fline = where.rpartition(":")
        names = loaded.names
        patterns = [(t, names[id(t)]) for t in f.tests]
        for j, t in enumerate(f.tests):
            if t.edits and t.edits.functions:
                tfile, _, tline = (t.origin or where).rpartition(":")
                cfg.warnings.append(
                    Problem(
                        tfile,
                        int(tline),
                        0,
                        f"files[{i}].tests[{j}].edits.functions",
                        "accepted for Torch Spyre compatibility and has no effect: "
                        "assertEqual already compares tensors across devices",
                    )
                )
        if not holds(f.when, ctx or Context.current()):
            cfg.warnings.append(
                Problem(fname, int(fline), 0, f"files[{i}]", "left out: its 'when:' does not hold")
            )
            continue
        written, pfile, pline, pcol, pkey = f.path_at
        text, missing = paths.expand(f.path, environ)
        for name in missing if check_paths else ():
            how = paths.HOW.get(name, f"export {name}=... or remove it from the path")
            if not paths.IDENT.match(name):
                msg = f"expected a variable name in ${{...}}; found {name!r}"
            else:
                msg = f"undefined variable ${{{name}}} in path {written!r}; {how}"
            problems.append(Problem(pfile, pline, pcol, pkey, msg))
        if missing:
            continue
        if paths.is_glob(text):
            var = paths.VAR.match(f.path)
            root = environ[var.group(1)] if var else str(Path(pfile).parent)
            outside = paths.glob_outside(text, root)
            if outside is not None:
                msg = (
                    "expected a glob inside the config's folder or inside the ${VAR} it "
                    f"starts with; found {written!r}, which would search {outside}. Start it "
                    "with a ${VAR} (e.g. ${TORCH_ROOT}/) or write it relative to the config"
                )
                problems.append(Problem(pfile, pline, pcol, pkey, msg))
                continue
        try:
            hits = paths.matches(text, glob_limit)
        except paths.GlobLimit:
            msg = (
                f"expected the glob {written!r} to look at most at {glob_limit:,} files and "
                f"folders; it looks at more. Narrow it, or raise the limit with "
                f"{paths.GLOB_LIMIT[0]}=<n>"
            )
            problems.append(Problem(pfile, pline, pcol, pkey, msg))
            continue
        if not hits and check_paths:
            if paths.is_glob(text):
                msg = f"expected the glob {text!r} to match test files; it matches none"
            else:
                msg = f"expected an existing test file; found nothing at {text}" + (
                    " (check ${TORCH_ROOT})" if "TORCH_ROOT" in f.path else ""
                )
            problems.append(Problem(pfile, pline, pcol, pkey, msg))
            continue
        if not hits and not paths.is_glob(text):
            hits = [text]  # not checked: kept as written
        cfg.resolved.append((f.path, tuple(hits)))
        for h in hits:
            cfg.files.append(ResolvedFile(Path(h), f, patterns))
    if problems:
        raise ConfigError(problems)
