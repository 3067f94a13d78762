# ootest example suite: OpInfo- and ModuleInfo-driven tests in upstream style
# (our own file), comparing every sample on the device with the CPU.
import torch
from torch.testing._internal.common_device_type import (
    instantiate_device_type_tests,
    ops,
)
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_modules import module_db, modules
from torch.testing._internal.common_utils import TestCase, run_tests

_OP_NAMES = ("add", "mul", "sub", "abs", "exp", "cumsum", "matmul", "div")
_OPS = [op for op in op_db if op.name in _OP_NAMES]
_MODULES = [m for m in module_db if m.name in ("nn.Linear", "nn.ReLU", "nn.GELU")]
_DTYPES = (torch.float32, torch.float16, torch.int64, torch.float64)


class TestOpConsistency(TestCase):
    @ops(_OPS, allowed_dtypes=_DTYPES)
    def test_matches_cpu(self, device, dtype, op):
        for sample in op.sample_inputs("cpu", dtype):
            expected = op(sample.input, *sample.args, **sample.kwargs)
            moved = sample.transform(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t)
            actual = op(moved.input, *moved.args, **moved.kwargs)
            self.assertEqual(actual, expected)


class TestModuleConsistency(TestCase):
    @modules(_MODULES, allowed_dtypes=(torch.float32, torch.float64))
    def test_forward_matches_cpu(self, device, dtype, module_info, training):
        inputs = module_info.module_inputs_func(
            module_info, device="cpu", dtype=dtype, requires_grad=False, training=training
        )
        for module_input in inputs[:2]:
            if module_input.forward_input is None:
                continue
            args, kwargs = (
                module_input.constructor_input.args,
                module_input.constructor_input.kwargs,
            )
            torch.manual_seed(0)
            reference = module_info.module_cls(*args, **kwargs).to(dtype)
            on_device = module_info.module_cls(*args, **kwargs).to(dtype)
            on_device.load_state_dict(reference.state_dict())
            on_device.to(device)
            fwd = module_input.forward_input
            expected = reference(*fwd.args, **fwd.kwargs)
            moved = [a.to(device) if isinstance(a, torch.Tensor) else a for a in fwd.args]
            self.assertEqual(on_device(*moved, **fwd.kwargs), expected)


instantiate_device_type_tests(TestOpConsistency, globals())
instantiate_device_type_tests(TestModuleConsistency, globals())

if __name__ == "__main__":
    run_tests()
