"""PyTorch DistributedDataParallel over AdaPrec: a communication hook and process-group setup for
`mpirun -np N python3 train.py`.

    import adaprec.torch
    adaprec.torch.init_process_group()                    # gloo, rank/size from MPI
    model = torch.nn.parallel.DistributedDataParallel(net)
    model.register_comm_hook(adaprec.torch.HookState(format="fp8s+ef"), adaprec.torch.hook)

Each gradient bucket is summed through AdaPrec over MPI (not through gloo) in the bucket's format and
averaged. Error feedback ("+ef") keeps one residual per bucket element; DDP regroups parameters into
new buckets after its first iteration (the bucket rebuild), so residuals are keyed by the bucket's
parameters and moved, parameter by parameter, into the new layout when the grouping changes.
"""

import os
import queue
import socket
import threading

import torch
import torch.distributed as dist

import adaprec


def init_process_group(backend="gloo", comm=None, **kwargs):
    """torch.distributed.init_process_group for a job started by mpirun (or srun with MPI).

    Rank and world size come from the mpi4py communicator (default MPI.COMM_WORLD). The rendezvous
    address is $MASTER_ADDR if set, else rank 0's host address; the port is $MASTER_PORT if set, else a
    free port chosen by rank 0. Rank 0's address is that of $GLOO_SOCKET_IFNAME when set (the
    interface gloo will use, e.g. ib0 or eth0), else what its host name resolves to. Both are broadcast
    over MPI, so every rank uses the same."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD if comm is None else comm
    address = port = None
    if comm.rank == 0:
        address = os.environ.get("MASTER_ADDR") or _host_address()
        port = os.environ.get("MASTER_PORT") or str(_free_port())
    address, port = comm.bcast((address, port), root=0)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = address, port
    dist.init_process_group(backend, rank=comm.rank, world_size=comm.size, **kwargs)


def _host_address():
    interface = os.environ.get("GLOO_SOCKET_IFNAME", "").split(",")[0]
    if interface:
        return _interface_address(interface)
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def _interface_address(name):
    """IPv4 address of a network interface (Linux SIOCGIFADDR)."""
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            request = struct.pack("256s", name[:15].encode())
            return socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, request)[20:24])
        except OSError as e:
            raise RuntimeError(f"adaprec.torch: no IPv4 address on interface {name!r} "
                               f"(GLOO_SOCKET_IFNAME): {e}") from e


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class HookState:
    """State of the AdaPrec DDP hook: its own AdaPrec communicator (and so its own error-feedback
    state), the format choice and running totals.

    format: a format spec ("fp16", "fp8s", "table4+ef", "fastest": the fastest format measured for
    each bucket size), or a callable(bucket_index, element_count) -> spec for per-bucket choices.
    algo: an AdaPrec algorithm name. check: the agreement round before every bucket (see
    adaprec.allreduce), on by default: ranks whose settings differ (format, algorithm, a bucket size)
    then raise MismatchError from backward() instead of summing garbage; it costs one 3-word
    allreduce per bucket (docs/python.md gives the measured cost). An error in the hook is raised by
    backward() (or whatever waits for the bucket) with its AdaPrec class and message.
    background: run the allreduces on one worker thread, so that they overlap with the rest of the
    backward pass as DDP's own gloo allreduce does (needs MPI_THREAD_MULTIPLE, mpi4py's default;
    otherwise, or with background=False, the hook reduces before it returns)."""

    def __init__(self, format="fp8s", algo="auto", comm=None, check=True, background=True):
        from mpi4py import MPI

        self.communicator = adaprec.Communicator(comm)
        self.format = format
        self.algo = algo
        self.check = check
        self.calls = 0
        self.wire_bytes = 0
        self.fp32_bytes = 0
        self.seconds = 0.0
        self.migrations = 0    # layouts whose parameters brought residuals from an earlier layout
        self._keys = {}        # tuple of parameter ids -> key
        self._places = {}      # parameter id -> (key, offset, numel) in the latest layout
        self._next_key = 0
        self._queue = None
        if background and MPI.Query_thread() >= MPI.THREAD_MULTIPLE:
            # One thread makes every AdaPrec call, in the order DDP hands over the buckets (the same
            # on every rank), so the collectives match; ctypes releases the GIL during each call.
            self._queue = queue.Queue()
            threading.Thread(target=self._work, args=(self._queue,), name="adaprec-ddp-hook",
                             daemon=True).start()

    def close(self):
        """Stops the worker thread (after the buckets already handed over)."""
        if self._queue is not None:
            self._queue.put(None)
            self._queue = None

    def format_for(self, bucket):
        if callable(self.format):
            return self.format(bucket.index(), bucket.buffer().numel())
        return self.format

    def key_for(self, bucket):
        """The error-feedback key of this bucket's parameter grouping; on a new grouping, residuals of
        its parameters are moved from their previous buckets. (Uses the communicator: call it from
        the thread that reduces, as the hook does.)"""
        return self._key_for_layout(_Layout(bucket))

    def _key_for_layout(self, layout):
        key = self._keys.get(layout.signature)
        if key is not None:
            return key
        key = f"ddp-bucket-{self._next_key}"
        self._next_key += 1
        self._keys[layout.signature] = key
        self._move_residuals(key, layout)
        for identity, offset, numel in zip(layout.signature, layout.offsets, layout.numels):
            self._places[identity] = (key, offset, numel)
        # Layouts none of whose parameters live there any more are dropped with their residuals.
        live = {place[0] for place in self._places.values()}
        for old_signature, old_key in list(self._keys.items()):
            if old_key not in live:
                del self._keys[old_signature]
                self.communicator.reset_feedback(old_key)
        return key

    def _move_residuals(self, key, layout):
        import numpy

        old = {}
        for identity in layout.signature:
            place = self._places.get(identity)
            if place is not None and place[0] not in old:
                old[place[0]] = self.communicator.feedback(place[0])
        old = {k: v for k, v in old.items() if v is not None}
        if not old:
            return
        algorithm = next(iter(old.values()))[0]
        slots = max(len(v[1]) for v in old.values())
        moved = numpy.zeros((slots, layout.count), dtype=numpy.float32)
        for identity, offset in zip(layout.signature, layout.offsets):
            place = self._places.get(identity)
            if place is None or place[0] not in old:
                continue
            old_key, old_offset, numel = place
            for s, values in enumerate(old[old_key][1]):
                moved[s, offset:offset + numel] = values[old_offset:old_offset + numel]
        self.communicator.set_feedback(key, algorithm, list(moved))
        self.migrations += 1

    def _reduce(self, buffer, spec, layout):
        """layout: the bucket's _Layout with error feedback, else None. spec: a format spec, or the
        exception that choosing one raised: this rank then takes part in the agreement round as
        invalid (the others raise PeerInvalidError) and raises it."""
        if isinstance(spec, Exception):
            try:
                self.communicator.allreduce(buffer, format=None, algo=self.algo, check=self.check)
            except TypeError:  # format=None: this rank's invalid input, told to the others
                pass
            raise spec
        key = self._key_for_layout(layout) if layout is not None else None
        stats = self.communicator.allreduce(buffer, format=spec, algo=self.algo, average=True, key=key,
                                            check=self.check)
        self.calls += 1
        self.wire_bytes += stats.wire_bytes
        self.fp32_bytes += stats.fp32_bytes
        self.seconds += stats.total_seconds

    def _work(self, jobs):  # its own reference: close() drops self._queue
        while True:
            job = jobs.get()
            if job is None:
                return
            future, buffer, spec, layout = job
            _complete(future, lambda: self._reduce(buffer, spec, layout), buffer)


class _Failure:
    """What a failed bucket's future holds. DDP's C++ reducer converts a hook's result to a tensor
    and a Future.set_exception value is not one ("Unable to cast <message> to Tensor", the exception
    class lost). Asking this object for its class raises the exception instead: the conversion's
    isinstance check hands that Python exception on unchanged (through the autograd engine), so
    backward() raises the AdaPrec error itself. Python's future.wait()/value() raise it too."""

    def __init__(self, error):
        self._error = error

    @property
    def __class__(self):
        raise self._error

    def __repr__(self):  # what a torch that converts some other way would print
        return f"{type(self._error).__name__}: {self._error}"


def _complete(future, reduce, buffer):
    try:
        reduce()
    except Exception as e:  # noqa: BLE001 - handed to DDP, which raises it in backward()
        def raise_error(_):
            raise e

        future._set_unwrap_func(raise_error)
        future.set_result(_Failure(e))
    else:
        future.set_result(buffer)


class _Layout:
    """What the reducing thread needs to know about a bucket's parameters (read in the hook)."""

    def __init__(self, bucket):
        parameters = bucket.parameters()
        self.signature = tuple(id(p) for p in parameters)
        self.numels = [p.numel() for p in parameters]
        self.offsets = _offsets(bucket)
        self.count = bucket.buffer().numel()


def _offsets(bucket):
    """Element offset of each parameter's gradient in the bucket buffer."""
    buffer = bucket.buffer()
    base = buffer.data_ptr()
    offsets = []
    for g in bucket.gradients():
        if g.data_ptr() < base or g.data_ptr() >= base + buffer.numel() * buffer.element_size():
            raise RuntimeError("adaprec.torch: a bucket gradient is not a view of the bucket buffer")
        offsets.append((g.data_ptr() - base) // buffer.element_size())
    return offsets


def hook(state, bucket):
    """DDP communication hook: sum and average the bucket through AdaPrec; the future completes when
    the bucket holds the average."""
    buffer = bucket.buffer()
    try:
        spec = state.format_for(bucket)
        layout = _Layout(bucket) if isinstance(spec, str) and "+ef" in spec else None
    except Exception as e:  # noqa: BLE001 - reported through the agreement round, see _reduce
        spec, layout = e, None
    future = torch.futures.Future()
    if state._queue is not None:
        state._queue.put((future, buffer, spec, layout))
    else:
        _complete(future, lambda: state._reduce(buffer, spec, layout), buffer)
    return future
