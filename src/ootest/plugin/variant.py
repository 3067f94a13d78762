"""Derive a :class:`~ootest.config.names.Variant` from a collected pytest item.

See Note [Canonical variant IDs]. Generated class and method names are data,
not identity: the template class is found among the generated class's bases,
the template method through ``functools.wraps`` metadata, and the op, dtype and
module from the ``param_kwargs`` that ``instantiate_device_type_tests`` binds
to every instantiated test. Nothing here imports torch.
"""

from __future__ import annotations

import functools
import hashlib
import re
from typing import Any

import pytest

from ootest.config.names import Variant
from ootest.memo import IdentityMemo

_AXIS_KEYS = {"device", "devices", "op", "dtype", "dtypes", "module_info"}


def _is_device_base(cls: type) -> bool:
    return "instantiate_test" in cls.__dict__ or (
        hasattr(cls, "instantiate_test") and hasattr(cls, "device_type")
    )


@functools.cache
def template_class(cls: type) -> tuple[type, str | None]:
    """(template class, device type) of a possibly generated device test class."""
    bases = cls.__bases__
    device_bases = [b for b in bases if _is_device_base(b)]
    others = [b for b in bases if not _is_device_base(b)]
    if device_bases and others and cls.__dict__.get("instantiate_test") is None:
        dev = getattr(device_bases[0], "device_type", None)
        return others[0], str(dev) if dev is not None else None
    return cls, None


def _param_kwargs(func: Any) -> dict[str, Any]:
    # instantiate_device_type_tests binds them as the default of a trailing
    # ``param_kwargs`` parameter of the instantiated test (read without inspect:
    # this runs for every one of thousands of variants).
    code = getattr(func, "__code__", None)
    defaults = getattr(func, "__defaults__", None)
    if code is None or not defaults:
        return {}
    names = code.co_varnames[: code.co_argcount]
    if names and names[-1] == "param_kwargs" and isinstance(defaults[-1], dict):
        return defaults[-1]
    return {}


@functools.cache
def _dtype_name(d: Any) -> str:
    return str(d).removeprefix("torch.")


_UNSAFE = re.compile(r"[\x00-\x1f\x7f]|^\s+|\s+$")


def _short(v: Any) -> str:
    """A parametrized value as it stands in a variant ID (Note [Variant ID grammar]
    in config/names.py): its name or text with ``,`` ``[`` ``]`` read as ``;`` ``(``
    ``)``, control characters and edge spaces as ``\\xNN``, and a long text cut at
    32 characters with a digest of the whole (``~1a2b3c``), so two long values
    that share their start keep two IDs."""
    text = getattr(v, "__name__", None) or str(v)
    text = text.replace(",", ";").replace("]", ")").replace("[", "(")
    if _UNSAFE.search(text):
        text = _UNSAFE.sub(lambda m: "".join(f"\\x{ord(c):02x}" for c in m.group()), text)
    if len(text) <= 40:
        return text
    return f"{text[:32]}~{hashlib.sha1(text.encode('utf-8', 'replace')).hexdigest()[:6]}"


@IdentityMemo  # OpInfos are not hashable
def _op_names(op: Any) -> tuple[str, str]:
    """(full name, name for config names and marks) of an OpInfo, once per OpInfo."""
    op_name = str(getattr(op, "name", op))
    op_full = str(getattr(op, "full_name", None) or op_name)
    variant_name = getattr(op, "variant_test_name", "")
    if variant_name and op_full == op_name:
        op_full = f"{op_name}.{variant_name}"
    # A Python reference (_refs.gcd) tests the op it refers to: capability gates
    # (supported_ops, edits.ops) and op__ marks written for "gcd" apply to it too;
    # a variant filter's op= does not (Note [Exact op filters]).
    torch_op = getattr(op, "torch_opinfo_name", None)
    if torch_op:
        op_name = str(torch_op)
    return op_full, op_name


def variant_from_item(item: pytest.Item, rel: str, device_names: frozenset[str]) -> Variant:
    """The canonical variant of a collected item; ``rel`` is its file as reported."""
    cls = getattr(item, "cls", None)
    obj = getattr(item, "obj", None)
    func = getattr(obj, "__func__", obj)
    if cls is None:  # a plain pytest function
        params: tuple[tuple[str, str], ...] = ()
        callspec = getattr(item, "callspec", None)
        if callspec is not None:
            params = tuple(sorted((k, _short(v)) for k, v in callspec.params.items()))
        name = getattr(item, "originalname", item.name)
        return Variant(file=rel, cls="", method=name, params=params)

    template, device_type = template_class(cls)
    gen_name = item.name
    # The class attribute, not the instance's: PyTorch's TestCase.__init__ may wrap it.
    for klass in cls.__mro__:  # inspect.getattr_static, for plain classes, faster
        if gen_name in klass.__dict__:
            func = klass.__dict__[gen_name]
            break
    func = getattr(func, "__func__", func)
    kwargs = _param_kwargs(func)
    method = getattr(func, "__name__", gen_name)
    if not gen_name.startswith(method):
        # A decorator without functools.wraps: fall back to the longest template
        # test name that prefixes the generated one.
        candidates = [n for n in dir(template) if n.startswith("test") and gen_name.startswith(n)]
        method = max(candidates, key=len) if candidates else gen_name

    op = kwargs.get("op")
    op_full, op_name = _op_names(op) if op is not None else (None, None)
    dtype_val = kwargs.get("dtypes", kwargs.get("dtype"))
    if isinstance(dtype_val, (list, tuple)):
        dtypes = tuple(_dtype_name(d) for d in dtype_val)
    elif dtype_val is not None:
        dtypes = (_dtype_name(dtype_val),)
    else:
        dtypes = ()
    module_info = kwargs.get("module_info")
    module = None
    if module_info is not None:
        module = str(getattr(module_info, "formatted_name", None) or module_info.name)
        module = str(getattr(module_info, "name", module))
    extra = tuple(sorted((k, _short(v)) for k, v in kwargs.items() if k not in _AXIS_KEYS))
    callspec = getattr(item, "callspec", None)
    if callspec is not None:  # @pytest.mark.parametrize on a method of a plain pytest class
        extra = tuple(sorted({*extra, *((k, _short(v)) for k, v in callspec.params.items())}))
    device_variant = device_type is not None and (
        device_type == "privateuse1" or device_type in device_names
    )
    if device_type is not None and not device_variant:
        # Instantiations for another device (cpu, meta...) in the same run are other
        # variants: the ID says which (the device's own ID carries no device).
        extra = tuple(sorted((*extra, ("device", device_type))))
    return Variant(
        file=rel,
        cls=template.__name__,
        method=method,
        op=op_full,
        op_name=op_name,
        dtypes=dtypes,
        module=module,
        params=extra,
        device_variant=device_variant,
        name=_parametrized_name(gen_name, device_type, device_names, dtypes),
        gen_name=gen_name,
        cls_aliases=_class_aliases(cls, template, device_type, device_names),
    )


@functools.cache
def _class_aliases(
    cls: type, template: type, device_type: str | None, device_names: frozenset[str]
) -> tuple[str, ...]:
    """Generated class names a config name copied from pytest's output may use:
    the class as collected, and both names upstream gives a privateuse1 class
    (``TestFooPRIVATEUSE1``, or ``TestFooEMU`` once the backend is renamed), so such
    a name keeps working whichever import order produced the listing."""
    if device_type is None:
        return ()
    t = template.__name__
    names = [cls.__name__, f"{t}{device_type.upper()}"]
    if device_type == "privateuse1" or device_type in device_names:
        names += [f"{t}PRIVATEUSE1", *(f"{t}{d.upper()}" for d in sorted(device_names))]
    return tuple(dict.fromkeys(n for n in names if n != t))


def _parametrized_name(
    gen_name: str, device_type: str | None, device_names: frozenset[str], dtypes: tuple[str, ...]
) -> str:
    """``test_x_add`` from ``test_x_add_emu_float32``: upstream's generated name
    (``{method}{_param suffix}{_device}{_dtypes}``) without the device and dtype."""
    if device_type is None:
        return gen_name
    dtype_tail = "".join(f"_{d}" for d in dtypes)
    for dev in (device_type, *device_names):
        tail = f"_{dev}{dtype_tail}"
        if gen_name.endswith(tail):
            return gen_name[: -len(tail)]
    return gen_name
