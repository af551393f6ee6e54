"""A stand-in for hip-python's ``hip.hip`` (:class:`FakeHip`): what kcompiler.runtime.hip calls, over host
memory, running the test kernel store_n in Python; the HIP runtime tests (test_runtime_hip.py) and the
device-array tests (test_device_array.py) launch through it on machines without an AMD GPU."""
from __future__ import annotations

import ctypes
import struct
from types import SimpleNamespace

from kcompiler.runtime.codeobject import read_code_object


class FakeHip:
    """The parts of hip-python's ``hip.hip`` that HipDevice calls, over host memory. A launch reads
    ``extra`` as the HIP runtime does ({BUFFER_POINTER, buf, BUFFER_SIZE, &size, END}) and runs
    store_n: ``a[i] = n`` for each work-item i of the block."""

    HIP_LAUNCH_PARAM_BUFFER_POINTER, HIP_LAUNCH_PARAM_BUFFER_SIZE, HIP_LAUNCH_PARAM_END = 1, 2, 3
    NAMES = {0: "hipSuccess", 1: "hipErrorInvalidValue", 98: "hipErrorInvalidDeviceFunction"}

    def __init__(self, target_id="gfx942:sramecc+:xnack-"):
        self.target_id = target_id
        self.memory: dict[int, ctypes.Array] = {}
        self.modules: dict[int, bytes] = {}
        self.launches: list[dict] = []
        self.fail_launch = 0
        self.current = None

    def hipGetDeviceCount(self):
        return 0, 1

    def hipSetDevice(self, i):
        self.current = i
        return (0,)

    def hipGetDeviceProperties(self, i):
        return 0, SimpleNamespace(name=b"Fake MI300X\0\0", gcnArchName=self.target_id.encode() + b"\0",
                                  warpSize=64, sharedMemPerBlock=65536, maxThreadsPerBlock=1024)

    def hipRuntimeGetVersion(self):
        return 0, 60241134  # a HIP 6.2 runtime (6.2.41134): one that serves the stack protocol

    def hipGetErrorName(self, err):
        return 0, self.NAMES.get(int(err), "hipErrorUnknown").encode()

    def hipGetErrorString(self, err):
        return 0, b"invalid argument" if int(err) == 1 else b""

    def hipModuleLoadData(self, image):
        h = len(self.modules) + 1
        self.modules[h] = bytes(image)
        return 0, h

    def hipModuleGetFunction(self, module, name):
        return 0, (module, name.decode())

    def hipMalloc(self, n):
        buf = ctypes.create_string_buffer(n)
        self.memory[ctypes.addressof(buf)] = buf
        return 0, ctypes.addressof(buf)

    def hipFree(self, p):
        del self.memory[p]
        return (0,)

    def hipMemcpyHtoD(self, dst, src, n):
        ctypes.memmove(dst, src, n)
        return (0,)

    def hipMemcpyDtoH(self, dst, src, n):
        ctypes.memmove(dst, src, n)
        return (0,)

    def hipDeviceSynchronize(self):
        return (0,)

    def hipModuleLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        assert params is None and isinstance(extra, int)
        cfg = (ctypes.c_void_p * 5).from_address(extra)
        assert (cfg[0], cfg[2], cfg[4]) == (1, 2, 3)
        size = ctypes.c_size_t.from_address(cfg[3]).value
        buf = ctypes.string_at(cfg[1], size)
        module, name = f
        kernel = read_code_object(self.modules[module]).kernel(name)
        self.launches.append(dict(kernel=name, grid=(gx, gy, gz), block=(bx, by, bz), shared=shared,
                                  stream=stream, buffer=buf))
        if self.fail_launch:
            return (self.fail_launch,)
        a_arg, n_arg = kernel.explicit_args
        a = struct.unpack_from("<Q", buf, a_arg.offset)[0]
        n = struct.unpack_from("<i", buf, n_arg.offset)[0]
        for i in range(bx):
            ctypes.c_int32.from_address(a + 4 * i).value = n
        return (0,)
