"""Graphs of launches: capture a sequence of kernel launches once, replay it with one call::

    with kc.graph() as g:                     # CUDA device 0 (target "auto"), or kc.graph(mod)
        mod.scale[grid, block](x, y, 2.0, n)  # captured, not run
        mod.vadd[grid, block](y, z, out, n)
    g.replay()                                # both launches, one cuGraphLaunch
    g.replay(stream=s)

On CUDA, :func:`graph` captures with the driver's stream capture (``cuStreamBeginCapture`` in
thread-local mode on a new non-blocking stream, or on ``stream=``; ``cuStreamEndCapture``,
``cuGraphInstantiate``) and :meth:`Graph.replay` is ``cuGraphLaunch``, as ``torch.cuda.CUDAGraph`` and
CuPy's ``Stream.begin_capture`` do. Inside the ``with`` block, launches with ``stream=None`` go to the
capturing stream. On the CPU target the launches are recorded (with their packed arguments) and run
again in order at each replay.

What a graph holds are the launches' arguments as they were at the capture: the device pointers of
the arrays (keep the arrays alive and write new inputs into them, as with torch's static tensors) and
the scalar values. Host arrays (numpy), which a launch copies in and out, are refused during a CUDA
capture (LaunchError), as are kernels that wait for their launch (printf="buffered").

Launches also work inside ``torch.cuda.graph(...)``: pass ``stream=torch.cuda.current_stream()`` (the
stream torch captures on); kcompiler's launch path makes no allocation, copy or wait for device
arrays and Python scalars.
"""
from __future__ import annotations

from typing import Any

from .device import Device, LaunchError


class Graph:
    """Launches captured on one device (see the module's docstring). Use as a context manager
    (:func:`graph`), then :meth:`replay` as often as needed; :meth:`close` frees it."""

    def __init__(self, device: Device, stream: Any = None):
        self.device = device
        self.stream = stream
        self._token: Any = None
        self._capturing = False
        self._ended = False
        self._exec: Any = None

    def __enter__(self) -> "Graph":
        if self._capturing or self._ended:
            raise LaunchError("this graph has already been captured; make a new kc.graph()")
        self._token = self.device.begin_capture(self.stream)
        self._capturing = True
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        self._capturing, self._ended = False, True
        self._exec = self.device.end_capture(self._token, keep=exc_type is None)
        return False

    def replay(self, stream: Any = None) -> None:
        """Launch the captured sequence on ``stream`` (None: the default stream; CUDA: any object
        ``stream=`` takes). Asynchronous on a GPU, like a launch. Raises LaunchError before the
        capture has ended or after :meth:`close`."""
        if self._exec is None:
            why = ("it is still capturing" if self._capturing else
                   "its capture failed or it was closed" if self._ended else
                   "capture launches first (with kc.graph() as g: ...)")
            raise LaunchError(f"nothing to replay: {why}")
        self._exec.replay(stream)

    def close(self) -> None:
        """Free the graph (idempotent)."""
        exe, self._exec = self._exec, None
        if exe is not None:
            exe.close()


def graph(device: Any = None, *, stream: Any = None) -> Graph:
    """A :class:`Graph` to capture launches into: ``with kc.graph() as g: ...; g.replay()``.

    ``device``: a :class:`~kcompiler.runtime.device.Device`, a Module (its device), a target name
    ('cuda', 'cpu', ...; its device 0) or None (the device of target 'auto': CUDA device 0, else the
    CPU). ``stream`` (CUDA): the stream to capture on, any object ``stream=`` takes (None: a new
    stream). Raises LaunchError where the device cannot capture (HIP for now)."""
    if device is None or device == "auto":
        from ..backends.registry import backends

        for backend in backends():  # as target "auto" picks: CUDA, else HIP, else the CPU
            cls = backend.device_class()
            if cls is not None and cls.count() > 0:
                device = cls.get(0)
                break
        else:
            raise LaunchError("kc.graph(): no backend finds a device here")
    elif isinstance(device, str):
        from ..backends import canonical_target
        from .module import device_for

        device = device_for(canonical_target(device))
    elif not isinstance(device, Device):
        dev = getattr(device, "device", None)
        if not isinstance(dev, Device):
            raise TypeError(f"kc.graph(device): expected a Device, a Module, a target name or None, got "
                            f"{type(device).__name__}")
        device = dev
    return Graph(device, stream)


__all__ = ["Graph", "graph"]
