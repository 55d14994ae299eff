"""AdaPrec for Python: compressed-wire, fp32-sum allreduce over an mpi4py communicator.

    from mpi4py import MPI
    import numpy as np, adaprec
    grad = np.ones(1 << 20, dtype=np.float32)
    stats = adaprec.allreduce(grad, format="fp8s", average=True)   # in place, MPI.COMM_WORLD

Buffers are float32 numpy arrays or contiguous torch tensors, passed by pointer (no copy): CPU
tensors, and CUDA tensors when the library was built with CUDA (built_with_cuda(); the reduction is
ordered on the tensor's current CUDA stream, see Communicator.allreduce). Every call is collective.
By default (check=True) the ranks first compare count, format, algorithm and averaging, and whether
each rank's buffer is usable, so a wrong dtype, a non-contiguous tensor or
different sizes on different ranks raise an exception on every rank (the bad rank gets TypeError or
ValueError naming the problem, the others PeerInvalidError or MismatchError) instead of hanging.
check=False skips that one small extra allreduce. The C API underneath is AdaPrec_Comm* in
adaprec/adaprec_mpi.h; the format and algorithm names are those of docs/formats.md and
docs/algorithms.md.
"""

import atexit
import contextlib
import ctypes
import sys
import threading
from dataclasses import dataclass

from . import _capi

__all__ = [
    "AdaPrecError", "InvalidArgumentError", "MismatchError", "PeerInvalidError", "UnsupportedError",
    "TransportError", "CudaError", "Stats", "Communicator", "allreduce", "communicator",
    "built_with_cuda",
]


class AdaPrecError(RuntimeError):
    """An AdaPrec call failed; .code is the C API's ADAPREC_ERR_* code."""

    def __init__(self, message, code=_capi.ERR_INTERNAL):
        super().__init__(message)
        self.code = code


class InvalidArgumentError(AdaPrecError, ValueError):
    """An argument the library does not accept (unknown format, missing key, ...)."""


class MismatchError(AdaPrecError):
    """Ranks called allreduce differently (count, format, algorithm, averaging)."""


class PeerInvalidError(AdaPrecError):
    """Another rank's input was invalid; nothing was reduced on any rank."""


class UnsupportedError(AdaPrecError):
    """A valid request this build or machine cannot serve."""


class TransportError(AdaPrecError):
    """MPI failed underneath."""


class CudaError(AdaPrecError):
    """The CUDA runtime failed: no usable GPU or driver, or an error of earlier work on the stream."""


_ERRORS = {
    _capi.ERR_INVALID_ARGUMENT: InvalidArgumentError,
    _capi.ERR_MALFORMED_INPUT: InvalidArgumentError,
    _capi.ERR_MISMATCH: MismatchError,
    _capi.ERR_UNSUPPORTED: UnsupportedError,
    _capi.ERR_TRANSPORT: TransportError,
    _capi.ERR_PEER_INVALID: PeerInvalidError,
    _capi.ERR_CUDA: CudaError,
}


def _check(code):
    if code != _capi.OK:
        message = _capi.lib.AdaPrec_LastError().decode(errors="replace")
        raise _ERRORS.get(code, AdaPrecError)(message, code)


def _require_mpi():
    """Raises TransportError unless MPI is usable: every C call that talks to MPI checks first, so
    that using adaprec before MPI_Init or after MPI_Finalize raises instead of aborting the process."""
    from mpi4py import MPI

    if MPI.Is_finalized():
        raise TransportError("adaprec: MPI has been finalized (MPI.Finalize() was called); "
                             "AdaPrec calls need MPI", _capi.ERR_TRANSPORT)
    if not MPI.Is_initialized():
        raise TransportError("adaprec: MPI is not initialized", _capi.ERR_TRANSPORT)


@dataclass(frozen=True)
class Stats:
    """What one allreduce did on this rank (adaprec::AllreduceStats)."""

    algorithm: str        # what ran (auto resolved)
    format: str           # wire format used
    count: int            # elements reduced
    wire_bytes: int       # bytes this rank sent
    fp32_bytes: int       # bytes this rank would have sent in fp32 with the same algorithm
    encode_seconds: float
    decode_seconds: float
    transfer_seconds: float
    total_seconds: float

    @property
    def compression(self):
        """fp32 bytes / bytes sent (1.0 when nothing was sent)."""
        return self.fp32_bytes / self.wire_bytes if self.wire_bytes else 1.0


def built_with_cuda():
    """True when the loaded libadaprec was built with CUDA, so allreduce takes CUDA tensors (whether
    this machine has a GPU is another matter: without one the call raises CudaError)."""
    return bool(_capi.lib.AdaPrec_HasCuda())


def _require_cuda_build(name, x):
    """Raises UnsupportedError saying how to build with CUDA unless the library has it."""
    if _capi.lib.AdaPrec_HasCuda():
        return
    how = _capi.lib.AdaPrec_LastError().decode(errors="replace").split(": ", 1)[-1]
    raise UnsupportedError(f"{name} is a CUDA tensor ({x.device}) but {how}; or pass {name}.cpu()",
                           _capi.ERR_UNSUPPORTED)


def _buffer(x, name, writable):
    """(address, element count, CUDA device index or None for host memory) of a usable buffer; raises
    TypeError, ValueError or UnsupportedError naming the problem otherwise."""
    torch = sys.modules.get("torch")  # a torch tensor can only exist once torch was imported
    if torch is not None and isinstance(x, torch.Tensor):
        if x.layout != torch.strided:
            raise ValueError(f"{name} has layout {x.layout} (sparse or otherwise not dense); "
                             f"pass tensor.to_dense()")
        if x.is_quantized:
            raise TypeError(f"{name} is a quantized tensor ({x.dtype}); AdaPrec reduces torch.float32")
        if x.dtype != torch.float32:
            raise TypeError(f"{name} has dtype {x.dtype}; AdaPrec reduces torch.float32")
        device = None
        if x.device.type == "cuda":
            _require_cuda_build(name, x)
            device = x.device.index if x.device.index is not None else 0
        elif x.device.type != "cpu":
            raise ValueError(f"{name} is on {x.device}; the Python module takes CPU and CUDA tensors")
        if not x.is_contiguous():
            raise ValueError(f"{name} is not contiguous; pass tensor.contiguous()")
        count = x.numel()
        address = x.data_ptr() if count else 0
        if count and not address:
            raise ValueError(f"{name} has no data in memory")
        return address, count, device
    try:
        import numpy
    except ImportError:  # without numpy only torch tensors can be passed
        numpy = None
    if numpy is not None and isinstance(x, numpy.ndarray):
        if x.dtype != numpy.float32:
            raise TypeError(f"{name} has dtype {x.dtype}; AdaPrec reduces float32")
        if not x.flags.c_contiguous:
            raise ValueError(f"{name} is not C-contiguous; pass numpy.ascontiguousarray(...)")
        if writable and not x.flags.writeable:
            raise ValueError(f"{name} is read-only")
        count = x.size
        return (x.__array_interface__["data"][0] if count else 0), count, None
    raise TypeError(f"{name} must be a float32 numpy array or torch tensor, not {type(x).__name__}")


def _text(value, name):
    """The bytes of a str argument (no NUL inside: C would cut it there)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if "\0" in value:
        raise ValueError(f"{name} {value!r} contains a NUL character")
    return value.encode()


def _where(device):
    return "in host memory" if device is None else f"on cuda:{device}"


def _cuda_stream(device, stream):
    """(stream handle, whether cuda:device must be made current for the call) for CUDA buffers on
    `device`; stream None: torch's current stream of that device."""
    torch = sys.modules["torch"]
    try:
        if stream is None:
            stream = torch.cuda.current_stream(device)
        handle = stream if isinstance(stream, int) else stream.cuda_stream
        switch = torch.cuda.current_device() != device
    except Exception as e:  # noqa: BLE001 - a torch without CUDA cannot hold a real CUDA tensor
        raise UnsupportedError(f"tensor is on cuda:{device} but torch cannot give its CUDA stream "
                               f"({type(e).__name__}: {e})", _capi.ERR_UNSUPPORTED) from e
    if not isinstance(handle, int):
        raise TypeError(f"stream must be a torch.cuda.Stream or its cuda_stream int, "
                        f"not {type(stream).__name__}")
    return handle, switch


def _arguments(tensor, out, format, algo, average, key, stream=None):
    """Everything allreduce needs from its arguments: ((send, recv, count, format, algo, average,
    key), cuda) with cuda None for host buffers or (device index, stream handle, switch device), or an
    exception naming what is wrong. Whatever examining them raises is caught, so that a bad argument
    on one rank is reported through the agreement round instead of leaving the others waiting in
    it."""
    try:
        send, count, device = _buffer(tensor, "tensor", writable=out is None)
        recv = send
        if out is not None:
            recv, out_count, out_device = _buffer(out, "out", writable=True)
            if out_device != device:
                raise ValueError(f"tensor is {_where(device)} and out {_where(out_device)}; "
                                 f"pass both on the same device")
            if out_count != count:
                raise ValueError(f"out has {out_count} elements, tensor has {count}")
            size = 4 * count
            if count and recv != send and send < recv + size and recv < send + size:
                raise ValueError("out overlaps tensor; pass the same buffer (in place) or a separate one")
        cuda = None
        if device is not None:
            cuda = (device,) + _cuda_stream(device, stream)
        return ((send, recv, count, _text(format, "format"), _text(algo, "algo"),
                 1 if bool(average) else 0, None if key is None else _text(key, "key")), cuda), None
    except Exception as e:  # noqa: BLE001 - any failure here is this rank's invalid input
        return None, e


class Communicator:
    """An AdaPrec communicator on (a duplicate of) an mpi4py communicator. Creation is collective.

    Holds the error-feedback state of every tensor key used with a "+ef" format."""

    def __init__(self, comm=None):
        from mpi4py import MPI

        if comm is None:
            comm = MPI.COMM_WORLD
        if not isinstance(comm, MPI.Comm):
            raise TypeError(f"comm must be an mpi4py communicator, not {type(comm).__name__}")
        self._handle = None
        _require_mpi()
        handle = ctypes.c_void_p()
        _check(_capi.lib.AdaPrec_CommCreate(ctypes.c_void_p(MPI._handleof(comm)), ctypes.byref(handle)))
        self._handle = handle
        rank, size = ctypes.c_int(), ctypes.c_int()
        _check(_capi.lib.AdaPrec_CommRank(handle, ctypes.byref(rank)))
        _check(_capi.lib.AdaPrec_CommSize(handle, ctypes.byref(size)))
        self.rank, self.size = rank.value, size.value

    def free(self):
        """Collective: releases the duplicate communicator and all error-feedback state. After
        MPI_Finalize it only releases memory (the duplicate went with MPI)."""
        if self._handle:
            handle, self._handle = self._handle, None
            _check(_capi.lib.AdaPrec_CommFree(handle))

    @property
    def freed(self):
        return not self._handle

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def _live(self):
        if not self._handle:
            raise ValueError("this adaprec.Communicator was freed")
        return self._handle

    def allreduce(self, tensor, format="fp32", algo="auto", average=False, key=None, out=None,
                  check=True, stream=None):
        """Sums `tensor` over all ranks, in place (or into `out`), and returns this rank's Stats.

        format: "fp32", "bf16", "fp16", "fp8", "fp8s", "e4m3", "table1".."table8", "table3z".."table8z",
        "fastest", with "+ef" for error feedback (then `key` names the tensor whose residuals are
        kept). algo: "auto", "native", "ring", "twoshot", "rabenseifner", "recursive_doubling", "hierarchical".
        check=True (the default): a bad argument on one rank raises there (TypeError/ValueError) and
        PeerInvalidError on the others; ranks that disagree all raise MismatchError. check=False skips
        that round where the library checks anyway; a bad argument then raises on its rank only.

        CUDA tensors (tensor and out on the same device; a library built with CUDA, else
        UnsupportedError saying how to build one): the reduction is queued on `stream` (a
        torch.cuda.Stream or its cuda_stream handle; default torch.cuda.current_stream of the
        tensor's device), after the work already queued there, and the call returns once that stream
        has run it: the result is in place and the stream has drained (AdaPrec_CommAllreduceDevice in
        adaprec/adaprec_mpi.h). Work on other streams is not waited for. No usable GPU: CudaError.
        `stream` is ignored for host buffers."""
        handle = self._live()
        _require_mpi()
        arguments, problem = _arguments(tensor, out, format, algo, average, key, stream)
        if problem is not None and not check:
            raise problem
        flags = _capi.CHECK_AGREEMENT if check else 0
        if problem is not None:
            flags |= _capi.LOCAL_INVALID
            arguments = ((0, 0, 0, None, None, 0, None), None)
        (send, recv, count, format_bytes, algo_bytes, average_flag, key_bytes), cuda = arguments
        stats = _capi.CallStats()
        if cuda is None:
            code = _capi.lib.AdaPrec_CommAllreduce(
                handle, ctypes.c_void_p(send), ctypes.c_void_p(recv), count, format_bytes, algo_bytes,
                average_flag, key_bytes, flags, ctypes.byref(stats))
        else:
            device, stream_handle, switch = cuda
            # The library takes buffers of the current device (a DDP hook thread starts on cuda:0).
            with sys.modules["torch"].cuda.device(device) if switch else contextlib.nullcontext():
                code = _capi.lib.AdaPrec_CommAllreduceDevice(
                    handle, ctypes.c_void_p(send), ctypes.c_void_p(recv), count, format_bytes,
                    algo_bytes, average_flag, key_bytes, flags, ctypes.byref(stats),
                    ctypes.c_void_p(stream_handle))
        if problem is not None:
            raise problem  # the other ranks were told and raise PeerInvalidError
        _check(code)
        return Stats(stats.algorithm.decode(), stats.format.decode(), stats.count, stats.wireBytes,
                     stats.fp32Bytes, stats.encodeSeconds, stats.decodeSeconds, stats.transferSeconds,
                     stats.totalSeconds)

    # ---- error-feedback state ----------------------------------------------------------------------
    def save_feedback(self):
        """This rank's error-feedback state as bytes (a versioned blob; see communicator.hpp)."""
        handle = self._live()
        size = ctypes.c_size_t()
        _check(_capi.lib.AdaPrec_CommSaveFeedback(handle, None, 0, ctypes.byref(size)))
        buf = ctypes.create_string_buffer(max(size.value, 1))
        _check(_capi.lib.AdaPrec_CommSaveFeedback(handle, buf, size.value, ctypes.byref(size)))
        return buf.raw[: size.value]

    def load_feedback(self, blob):
        """Replaces all error-feedback state with what save_feedback returned (on this rank)."""
        if not isinstance(blob, (bytes, bytearray)):
            raise TypeError(f"blob must be bytes, not {type(blob).__name__}")
        _check(_capi.lib.AdaPrec_CommLoadFeedback(self._live(), bytes(blob), len(blob)))

    def reset_feedback(self, key=None):
        """Forgets the residuals of one key, or of every key."""
        _check(_capi.lib.AdaPrec_CommResetFeedback(self._live(), None if key is None else _text(key, "key")))

    def feedback(self, key):
        """(algorithm, list of float32 numpy arrays, one per slot) of a key, or None if unknown."""
        import numpy

        handle = self._live()
        name = _text(key, "key")
        count, slots = ctypes.c_uint64(), ctypes.c_uint64()
        algo = ctypes.create_string_buffer(32)
        _check(_capi.lib.AdaPrec_CommFeedbackInfo(handle, name, ctypes.byref(count),
                                                  ctypes.byref(slots), algo, len(algo)))
        if slots.value == 0 and count.value == 0 and not algo.value:
            return None
        arrays = []
        for slot in range(slots.value):
            values = numpy.empty(count.value, dtype=numpy.float32)
            _check(_capi.lib.AdaPrec_CommGetFeedback(handle, name, slot,
                                                     values.ctypes.data, count.value))
            arrays.append(values)
        return algo.value.decode(), arrays

    def set_feedback(self, key, algorithm, slots):
        """Replaces a key's residuals: `slots` is a list of equally long float32 arrays."""
        import numpy

        name, algo = _text(key, "key"), _text(algorithm, "algorithm")
        data = numpy.ascontiguousarray(numpy.stack(slots) if slots else numpy.zeros((0, 0)),
                                       dtype=numpy.float32)
        if data.ndim != 2:  # numbers instead of arrays would stack to 1-D: slots of no elements
            raise ValueError(f"slots must be a list of equally long 1-D float32 arrays, got shape {data.shape}")
        _check(_capi.lib.AdaPrec_CommSetFeedback(self._live(), name, algo, data.shape[1],
                                                 data.shape[0], data.ctypes.data))


# ---- the per-communicator cache ----------------------------------------------------------------------
# The Communicator of an mpi4py communicator is kept as an MPI attribute of it, so it lives exactly as
# long as the MPI communicator: comm.Free() (collective) frees it too, through the keyval's delete
# callback, and a later communicator that MPI gives the same handle starts without one. (A dict keyed
# by the handle would hand that new communicator the freed one's AdaPrec communicator: wrong sums.)
# MPI.COMM_WORLD and MPI.COMM_SELF are never freed: their Communicators, and those of communicators
# still alive then, are freed when MPI is finalized, by MPI.Finalize() (through an attribute on
# COMM_SELF, whose attributes MPI deletes first, while MPI still works) or at interpreter exit (before
# mpi4py finalizes MPI). Afterwards every adaprec call raises TransportError.

_cache_lock = threading.Lock()
_cache_keyval = None
_cached = set()    # Communicators held by communicator() that are not freed yet


def _release(value):
    """Frees a cached Communicator; called from MPI's attribute delete callbacks, so never raises."""
    with _cache_lock:
        _cached.discard(value)
    try:
        value.free()
    except Exception:  # noqa: BLE001 - AdaPrec_CommFree does not fail; a callback must not raise
        pass


def _release_all(*_):
    with _cache_lock:
        values = list(_cached)
    for value in values:
        _release(value)


def _keyval():
    global _cache_keyval
    from mpi4py import MPI

    with _cache_lock:
        if _cache_keyval is None:
            _cache_keyval = MPI.Comm.Create_keyval(delete_fn=lambda comm, keyval, value: _release(value))
            finalize_keyval = MPI.Comm.Create_keyval(delete_fn=_release_all)
            MPI.COMM_SELF.Set_attr(finalize_keyval, True)
            atexit.register(lambda: MPI.Is_finalized() or _release_all())
        return _cache_keyval


def communicator(comm=None):
    """The Communicator this module uses for an mpi4py communicator (created on first use, collective).

    Kept as an attribute of the MPI communicator: freeing that (comm.Free(), collective) frees it."""
    from mpi4py import MPI

    if comm is None:
        comm = MPI.COMM_WORLD
    if not isinstance(comm, MPI.Comm):
        raise TypeError(f"comm must be an mpi4py communicator, not {type(comm).__name__}")
    _require_mpi()
    if comm == MPI.COMM_NULL:
        raise InvalidArgumentError("comm is MPI.COMM_NULL", _capi.ERR_INVALID_ARGUMENT)
    if comm.Is_inter():  # the C API refuses it too (it crashed in MPI_Comm_split_type)
        raise InvalidArgumentError("adaprec: an intercommunicator cannot carry AdaPrec's allreduce; give an "
                                   "intracommunicator", _capi.ERR_INVALID_ARGUMENT)
    keyval = _keyval()
    cached = comm.Get_attr(keyval)
    if cached is None or cached.freed:
        cached = Communicator(comm)
        with _cache_lock:
            _cached.add(cached)
        comm.Set_attr(keyval, cached)  # replacing a freed one runs the delete callback on it: a no-op
    return cached


def allreduce(tensor, format="fp32", algo="auto", average=False, comm=None, key=None, out=None,
              check=True, stream=None):
    """Communicator.allreduce on the cached Communicator of `comm` (default MPI.COMM_WORLD)."""
    return communicator(comm).allreduce(tensor, format=format, algo=algo, average=average, key=key,
                                        out=out, check=check, stream=stream)
