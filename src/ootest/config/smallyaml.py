"""YAML from the small files a command is handed besides configs (a supported-ops
list, selection preferences, a scope): the bounds of Note [Config bounds] without
the config schema.

A 300-byte alias bomb hung ``select run --supported`` (PyYAML builds shared nodes,
then everything that walks the result as a tree expands them): the composed node
graph is measured first, each node once, and anything past the bounds is one line
with the file and line. Duplicate keys are an error where asked (a preferences
file where a second ``notes:`` silently won).
"""

from __future__ import annotations

from typing import Any

import yaml

from ootest.errors import UserError

__all__ = ["MAX_DEPTH", "MAX_NODES", "load"]

MAX_NODES = 200_000  # values once aliases are expanded
MAX_DEPTH = 64  # levels of nesting


def load(text: str, where: str, *, unique_keys: bool = False) -> Any:
    """The data of the YAML ``text`` (``where`` names the file in errors), or one
    :class:`~ootest.errors.UserError` line: a syntax error, more than
    :data:`MAX_NODES` values with aliases expanded, deeper than :data:`MAX_DEPTH`,
    a recursive alias, or (``unique_keys``) a key given twice in one mapping."""
    loader_cls = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        node = yaml.compose(text, Loader=loader_cls)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f"{where}:{mark.line + 1}" if mark is not None else where
        problem = getattr(e, "problem", None) or "invalid YAML"
        raise UserError(f"{at}: expected YAML; found a syntax error ({problem}); fix it") from None
    if node is None:
        return None
    _Measure(where, unique_keys).size(node, 0)
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        raise UserError(f"{where}: expected plain YAML data; found {e}") from None
    finally:
        loader.dispose()


class _Measure:
    def __init__(self, where: str, unique_keys: bool) -> None:
        self.where, self.unique_keys = where, unique_keys
        self.sizes: dict[int, int] = {}
        self.active: set[int] = set()

    def fail(self, node: Any, message: str) -> UserError:
        return UserError(f"{self.where}:{node.start_mark.line + 1}: {message}")

    def size(self, node: Any, depth: int) -> int:
        if depth > MAX_DEPTH:
            raise self.fail(node, f"expected at most {MAX_DEPTH} levels of nesting; found more")
        key = id(node)
        known = self.sizes.get(key)
        if known is not None:
            return known
        if key in self.active:
            raise self.fail(node, "expected plain data; found an alias that contains itself")
        self.active.add(key)
        total = 1
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, int] = {}
            for k, v in node.value:
                if self.unique_keys and isinstance(k, yaml.ScalarNode):
                    first = seen.setdefault(k.value, k.start_mark.line + 1)
                    if first != k.start_mark.line + 1:
                        raise self.fail(
                            k, f"duplicate key {k.value!r} (first at line {first}); keep one"
                        )
                total += self.size(k, depth + 1) + self.size(v, depth + 1)
                if total > MAX_NODES:
                    break
        elif isinstance(node, yaml.SequenceNode):
            for v in node.value:
                total += self.size(v, depth + 1)
                if total > MAX_NODES:
                    break
        if total > MAX_NODES:
            raise self.fail(
                node,
                f"expected at most {MAX_NODES:,} values once YAML aliases are expanded; "
                "found more (an alias bomb?); write the values out",
            )
        self.active.discard(key)
        self.sizes[key] = total
        return total
