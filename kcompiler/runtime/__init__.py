"""The runtime: Module / Kernel / launches (module.py) over a Device (device.py): CUDA (cuda.py), HIP
(hip.py, with the code object reader codeobject.py) and the CPU emulator (cpu.py); argument rules
(arrays.py), what the GPU devices share in marshalling them (marshal.py) and the compilation cache
(cache.py).

Nothing is imported here, so that ``kcompiler.runtime.cache`` stays cheap to import."""
