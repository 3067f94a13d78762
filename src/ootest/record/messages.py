"""Whether a test matches exception messages: a fact of the variant record.

Note [Tests that match messages]
The replay counts a call that raises on the device as on the CPU (the device's
exception of the CPU's class or a subclass) as working: a test expecting the
exception passes (Note [Replaying calls]). Not when the test matches the
message (``self.assertRaisesRegex(RuntimeError, "shape mismatch", ...)``) and
the device says something else: a missing kernel's ``NotImplementedError``
("Could not run 'aten::_index_put_impl_' ...") is a ``RuntimeError`` but not
that message. Such a call counts as working only for a test that does not match
messages (ootest.select.gather). Which tests do is read from their code, in the
two places selection takes variants from: collection (``--ootest-variants``,
``checks_messages`` on each variant; ``checks_messages`` below reads the
compiled test function, its nested functions and lambdas, and the methods of its
class it calls as ``self.X``, one level deep) and the repository memory (its
``refs`` hold the ``self.X`` a test and its helpers use). A check made through a
helper of another module is not seen: refinement corrects what slips through.

Two more ways to match a message are read at collection (issue 36): the
exception an ``assertRaises``/``assertWarns`` context caught, read afterwards
(``with self.assertRaises(E) as cm: ...``, then ``str(cm.exception)``: the
names ``assertRaises`` and ``exception`` in one test), and ``pytest.raises`` with
``match=`` (or ``excinfo.match(...)``). The memory's ``refs`` record
``self.X`` names only, so a test that matches messages these ways alone is seen
by collection (``--ootest-variants``), not by a memory: pass the variants.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Iterator
from typing import Any

__all__ = ["MESSAGE_CHECKS", "checks_messages"]

#: The ``unittest``/``TestCase`` methods (torch's included) that match a message.
MESSAGE_CHECKS = (
    "assertRaisesRegex",
    "assertRaisesRegexp",
    "assertWarnsRegex",
    "assertWarnsOnceRegex",
    "assertRaisesRegexWithHighlight",
    "assertExpectedRaises",
    "assertExpectedRaisesInline",
)
_CHECKS = frozenset(MESSAGE_CHECKS)
#: contexts whose caught exception a test may read afterwards (``cm.exception``)
_CAUGHT = frozenset({"assertRaises", "assertWarns"})
_READ = frozenset({"exception", "warning"})
_MAX_CODES = 200  # code objects walked per test: bounded for generated monsters


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    todo, n = [code], 0
    while todo and n < _MAX_CODES:
        c = todo.pop()
        n += 1
        yield c
        todo.extend(k for k in c.co_consts if isinstance(k, types.CodeType))


def _names(func: Any) -> set[str]:
    """The names ``func``'s code (or ``func``, a code object) uses, with
    ``assertRaisesRegex`` standing for the other ways it may match a message
    (Note [Tests that match messages])."""
    if isinstance(func, types.CodeType):
        code: Any = func
    else:
        code = getattr(inspect.unwrap(func), "__code__", None) if callable(func) else None
    if not isinstance(code, types.CodeType):
        return set()
    names: set[str] = set()
    keywords: set[str] = set()
    for c in _codes(code):
        names.update(c.co_names)
        for k in c.co_consts:  # keyword names of calls (``match=``)
            if isinstance(k, tuple) and all(isinstance(x, str) for x in k):
                keywords.update(k)
    if names & _CAUGHT and names & _READ:
        names.add("assertRaisesRegex")  # ``str(cm.exception)`` after the context
    if "raises" in names and ("match" in names or "match" in keywords):
        names.add("assertRaisesRegex")  # ``pytest.raises(E, match=...)``
    return names


def checks_messages(func: Any, owner: type | None = None) -> bool:
    """Whether ``func`` (a test function, decorated or not) or a method of
    ``owner`` it calls as ``self.X`` uses one of ``MESSAGE_CHECKS``."""
    try:
        code = getattr(inspect.unwrap(func), "__code__", None) if callable(func) else None
        # every variant of a template (each op and dtype its own wrapper) has its code
        return _checks(code, owner) if isinstance(code, types.CodeType) else False
    except Exception:  # a hostile decorator's __wrapped__ cycle, an unhashable owner
        return False


@functools.lru_cache(maxsize=4096)
def _checks(code: types.CodeType, owner: type | None) -> bool:
    try:
        names = _names(code)
        if names & _CHECKS:
            return True
        if owner is None:
            return False
        for n in names:
            member = inspect.getattr_static(owner, n, None)
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if isinstance(member, types.FunctionType) and _names(member) & _CHECKS:
                return True
    except Exception:  # a hostile decorator's __wrapped__ cycle, an odd descriptor
        return False
    return False
