# ootest example suite: an upstream-style device-generic test file, written by the
# ootest authors in the way PyTorch's test/ files are written. It uses the real
# torch.testing._internal machinery that ships in the torch wheel.
import torch
from torch.testing._internal.common_device_type import (
    dtypes,
    instantiate_device_type_tests,
    onlyCUDA,
    onlyNativeDeviceTypes,
)
from torch.testing._internal.common_utils import TestCase, run_tests


class TestTensorBasics(TestCase):
    @dtypes(torch.float32, torch.float16, torch.int64, torch.float64)
    def test_add_matches_cpu(self, device, dtype):
        a = torch.arange(12, dtype=dtype).reshape(3, 4)
        b = torch.ones(3, 4, dtype=dtype)
        self.assertEqual((a.to(device) + b.to(device)).cpu(), a + b)

    @dtypes(torch.float32, torch.bfloat16)
    def test_view_aliases_storage(self, device, dtype):
        t = torch.zeros(2, 3, dtype=dtype, device=device)
        t.t()[1, 0] = 7
        self.assertEqual(t[0, 1].item(), 7)
        self.assertEqual(t.t().stride(), (1, 3))

    @dtypes(torch.float32)
    def test_cumsum(self, device, dtype):
        # cumsum has no kernel on a young backend: NotImplementedError.
        x = torch.arange(5, dtype=dtype)
        self.assertEqual(torch.cumsum(x.to(device), 0).cpu(), torch.cumsum(x, 0))

    @dtypes(torch.float32)
    def test_sum_then_mean(self, device, dtype):
        x = torch.linspace(0, 1, 100, dtype=dtype)
        self.assertEqual(x.to(device).sum().cpu(), x.sum())
        self.assertEqual(x.to(device).mean().cpu(), x.mean())

    @dtypes(torch.float16)
    def test_half_accumulation(self, device, dtype):
        # Adding 0.1 three hundred times in half precision ends about 0.7 below the
        # float32 result; a backend states the tolerance it guarantees through a
        # precision override instead of editing the test.
        acc = torch.zeros((), dtype=dtype, device=device)
        for value in torch.full((300,), 0.1, dtype=dtype).to(device).unbind():
            acc = acc + value
        self.assertEqual(acc.cpu().float(), torch.tensor(30.0), atol=1e-3, rtol=0)

    @dtypes(torch.float32)
    def test_matmul_int_promotion(self, device, dtype):
        a = torch.ones(2, 2, dtype=torch.int64, device=device)
        self.assertEqual((a @ a).cpu(), torch.full((2, 2), 2))

    @onlyCUDA
    def test_cuda_streams(self, device):
        self.assertTrue(torch.cuda.current_stream() is not None)

    @onlyNativeDeviceTypes
    def test_empty_like_native(self, device):
        t = torch.empty(3, device=device)
        self.assertEqual(torch.empty_like(t).shape, (3,))

    def test_scalar_read(self, device):
        self.assertEqual(torch.tensor(3.5, device=device).item(), 3.5)


class TestCudaOnlyKernels(TestCase):
    def test_fill(self, device):
        t = torch.empty(4, device=device).fill_(2.0)
        self.assertEqual(t.cpu(), torch.full((4,), 2.0))


instantiate_device_type_tests(TestTensorBasics, globals())
instantiate_device_type_tests(TestCudaOnlyKernels, globals(), only_for="cuda")

if __name__ == "__main__":
    run_tests()
