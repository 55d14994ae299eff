"""PyTorch DistributedDataParallel over AdaPrec: a communication hook and process-group setup for
`mpirun -np N python3 train.py`.

    import adaprec.torch
    adaprec.torch.init_process_group()                    # gloo, rank/size from MPI
    model = torch.nn.parallel.DistributedDataParallel(net)
    adaprec.torch.HookState(format="fp8s+ef").register(model)  # = model.register_comm_hook(state, hook)

Each gradient bucket is summed through AdaPrec over MPI (not through gloo or nccl) in the bucket's
format and averaged. CUDA buckets (a library built with CUDA) are reduced in device memory, ordered on
the CUDA stream that was current when DDP handed the bucket over; the process group may then be
DDP's nccl (init_process_group("nccl"), one GPU per rank: torch.cuda.set_device first), which DDP
still uses for its own broadcasts while the hook replaces its allreduce. Error feedback ("+ef") keeps one residual per bucket element; DDP regroups parameters into
new buckets after its first iteration (the bucket rebuild), so residuals are keyed by the bucket's
parameters and moved, parameter by parameter, into the new layout when the grouping changes. A
parameter is known by its identity while it lives (a weak reference): the residuals of a model that
is gone are dropped, never handed to a new model whose parameters got the same id().
"""

import atexit
import copy
import os
import queue
import socket
import threading
import warnings
import weakref

import torch
import torch.distributed as dist

import adaprec
from adaprec.controller import (  # noqa: F401 - re-exported: part of this module's API
    Controller, controller_default, default_candidates, schedule_rates, schedule_zero_from)


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


# Hook states whose worker thread may still run, and the worker threads themselves: at the
# interpreter's exit each state is closed and every thread joined. A daemon thread still inside torch
# (the future's set_result runs DDP's callbacks) when finalization began was ended by Python with
# pthread_exit, whose unwinding through torch's C++ frames aborted the process ("terminate called
# without an active exception") after a successful run, now and then. The threads are kept apart
# from the states: a worker that took its stop signal drops its state (Thread.run deletes its
# target) while it still tears down, so a state-only registry let the exit go ahead of it (1 run in
# 10-20 of examples/ddp_adaptive.py aborted that way).
_live_hook_states = weakref.WeakSet()
_hook_threads = []


def _track_hook_thread(thread):
    _hook_threads[:] = [t for t in _hook_threads if t.is_alive()] + [thread]


@atexit.register
def _close_hook_states():
    for state in list(_live_hook_states):
        state.close()
    for thread in list(_hook_threads):
        thread.join(10.0)


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
    otherwise, or with background=False, the hook reduces before it returns).
    process_group: the group DDP was given (DistributedDataParallel(process_group=...); None: the
    default group). DDP does not tell a hook its group, and the hook sums over `comm`: the first bucket
    checks that both have the same size, else backward() raises ValueError on every rank (a hook over
    COMM_WORLD under DDP on a subgroup averaged the gradients of every group into each, silently).
    Use a state for one model at a time; a new model (a fold, a trial) gets a new state, though the
    residuals of a model that is gone are dropped either way."""

    def __init__(self, format="fp8s", algo="auto", comm=None, check=True, background=True, process_group=None):
        from mpi4py import MPI

        self.communicator = adaprec.Communicator(comm)
        self.process_group = process_group
        self._group_checked = False
        self.format = format
        self.algo = algo
        self.check = check
        self.calls = 0
        self.wire_bytes = 0
        self.fp32_bytes = 0
        self.seconds = 0.0
        self.algorithms = {}   # algorithm that ran (auto resolved: "native" when it sent fp32) -> calls
        self.migrations = 0    # layouts whose parameters brought residuals from an earlier layout
        self._keys = {}        # tuple of parameter ids -> key
        self._places = {}      # parameter id -> (key, offset, numel) in the latest layout
        self._refs = {}        # parameter id -> weak reference to that parameter (ids are reused)
        self._feedback_keys = set()  # keys that may hold residuals
        self._next_key = 0
        self._queue = None
        self._thread = None
        if background and MPI.Query_thread() >= MPI.THREAD_MULTIPLE:
            # One thread makes every AdaPrec call, in the order DDP hands over the buckets (the same
            # on every rank), so the collectives match; ctypes releases the GIL during each call.
            self._queue = queue.Queue()
            self._thread = threading.Thread(target=self._work, args=(self._queue,), name="adaprec-ddp-hook",
                                            daemon=True)
            self._thread.start()
            _live_hook_states.add(self)
            _track_hook_thread(self._thread)

    def close(self, wait=None):
        """Stops the worker thread (after the buckets already handed over); with `wait` (seconds),
        waits that long at most for it to end. A close without `wait` still has its thread joined at
        the interpreter's exit (it used to forget the thread, which could then still be inside torch
        when Python ended it: "terminate called without an active exception", now and then)."""
        if self._queue is not None:
            self._queue.put(None)
            self._queue = None
        if wait is not None and self._thread is not None:
            self._thread.join(wait)

    def register(self, model):
        """model.register_comm_hook(self, hook), with the process group DDP was given recorded for the
        first bucket's size check (process_group above); returns model."""
        self.process_group = model.process_group
        model.register_comm_hook(self, hook)
        return model

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
        if any(self._refs.get(i, _alive)() is None for i in layout.signature):
            self._forget_dead_parameters()
        key = self._keys.get(layout.signature)
        if key is not None:
            return key
        key = f"ddp-bucket-{self._next_key}"
        self._next_key += 1
        self._keys[layout.signature] = key
        self._feedback_keys.add(key)
        self._move_residuals(key, layout)
        for identity, offset, numel, parameter in zip(layout.signature, layout.offsets, layout.numels,
                                                      layout.parameters):
            self._places[identity] = (key, offset, numel)
            self._refs[identity] = weakref.ref(parameter)
        self._drop_unused_keys()
        return key

    def _forget_dead_parameters(self):
        """Parameters that no longer exist (their model was dropped) lose their places, and layouts
        with one of them are forgotten: their ids may now name a new model's parameters, which would
        otherwise inherit the old residuals (a HookState kept across k-fold folds fed each fold's
        first steps the previous fold's residuals)."""
        dead = {i for i, ref in self._refs.items() if ref() is None}
        for identity in dead:
            del self._refs[identity]
            self._places.pop(identity, None)
        for signature in [s for s in self._keys if any(i in dead for i in s)]:
            del self._keys[signature]
        self._drop_unused_keys()

    def _drop_unused_keys(self):
        """Residuals of keys where no live parameter has its place any more are released."""
        live = {place[0] for place in self._places.values()}
        for signature, key in list(self._keys.items()):
            if key not in live:
                del self._keys[signature]
        for key in self._feedback_keys - live:
            self._feedback_keys.discard(key)
            self.communicator.reset_feedback(key)

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

    def _reduce(self, buffer, spec, layout, stream=None):
        """layout: the bucket's _Layout with error feedback, else None. spec: a format spec, or the
        exception that choosing one raised: this rank then takes part in the agreement round as
        invalid (the others raise PeerInvalidError) and raises it. stream: a CUDA bucket's stream
        (the hook's current one: the worker thread has its own)."""
        key = None
        if not isinstance(spec, Exception):
            try:
                self._check_group()
                key = self._key_for_layout(layout) if layout is not None else None
            except Exception as e:  # noqa: BLE001 - this rank alone may fail: told to the others below
                spec = e
        if isinstance(spec, Exception):
            try:
                self.communicator.allreduce(buffer, format=None, algo=self.algo, check=self.check)
            except (TypeError, ValueError):  # format=None or the buffer itself: told to the others
                pass
            raise spec
        stats = self.communicator.allreduce(buffer, format=spec, algo=self.algo, average=True, key=key,
                                            check=self.check, stream=stream)
        self.calls += 1
        self.wire_bytes += stats.wire_bytes
        self.fp32_bytes += stats.fp32_bytes
        self.seconds += stats.total_seconds
        self.algorithms[stats.algorithm] = self.algorithms.get(stats.algorithm, 0) + 1

    def _check_group(self):
        if self._group_checked:
            return
        group_size = dist.get_world_size(self.process_group) if dist.is_initialized() else None
        if group_size is not None and group_size != self.communicator.size:
            raise ValueError(f"adaprec.torch.HookState: DDP's process group has {group_size} ranks but the hook's "
                             f"communicator {self.communicator.size}: the hook would average over other ranks "
                             f"than DDP's; pass HookState(comm=...) an MPI communicator of DDP's ranks and "
                             f"process_group= the group DDP was given")
        self._group_checked = True

    def _work(self, jobs):  # its own reference: close() drops self._queue
        while True:
            job = jobs.get()
            if job is None:
                return
            future, buffer, spec, layout, stream = job
            _complete(future, lambda: self._reduce(buffer, spec, layout, stream), buffer)


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
        # Bound to a name of its own: Python deletes `e` when the except clause ends, and a closure over
        # it raised NameError ("cannot access free variable 'e'") from future.wait()/value() instead.
        error = e

        def raise_error(_):
            raise error

        future._set_unwrap_func(raise_error)
        future.set_result(_Failure(error))
    else:
        future.set_result(buffer)


def _alive():  # a weak reference's stand-in for a parameter not seen before
    return True


class _Layout:
    """What the reducing thread needs to know about a bucket's parameters (read in the hook)."""

    def __init__(self, bucket):
        parameters = bucket.parameters()
        self.parameters = parameters  # alive until the layout is used, so their ids stay theirs
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


def _process_group_device():
    """Where the default process group's collectives take tensors: nccl's on this rank's GPU."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def hook(state, bucket):
    """DDP communication hook: sum and average the bucket through AdaPrec; the future completes when
    the bucket holds the average."""
    buffer = bucket.buffer()
    stream = None
    try:
        if buffer.layout != torch.strided:  # DDP puts sparse gradients in buckets of their own
            raise ValueError(f"adaprec.torch.hook: a bucket of {buffer.layout} gradients (nn.Embedding(sparse=True) "
                             f"or similar); the hook reduces dense gradients only: make them dense (sparse=False)")
        spec = state.format_for(bucket)
        layout = _Layout(bucket) if isinstance(spec, str) and "+ef" in spec else None
        if buffer.is_cuda:  # the stream the bucket's gradients were queued on
            stream = torch.cuda.current_stream(buffer.device)
    except Exception as e:  # noqa: BLE001 - reported through the agreement round, see _reduce
        spec, layout = e, None
    # A future holding a CUDA tensor must name its device (torch.futures.Future).
    future = torch.futures.Future(devices=[buffer.device]) if buffer.is_cuda else torch.futures.Future()
    if state._queue is not None:
        state._queue.put((future, buffer, spec, layout, stream))
    else:
        _complete(future, lambda: state._reduce(buffer, spec, layout, stream), buffer)
    return future


# ---- Adaptive precision: the AdaPrec precision controller driving a DDP training loop --------------

def _copied_state(state_dict):
    """A deep copy of a scheduler's (or optimizer's) state_dict, entry by entry. Entries that cannot be
    copied are kept as they are: CyclicLR's state holds a WeakMethod to its own scale function (torch
    1.13: "cannot pickle 'WeakMethod' object"), a reference that training never changes."""

    out = {}
    for key, value in state_dict.items():
        try:
            out[key] = copy.deepcopy(value)
        except TypeError:
            out[key] = value
    return out


def _median(values):
    values = sorted(values)
    n = len(values)
    return values[n // 2] if n % 2 else 0.5 * (values[n // 2 - 1] + values[n // 2])


def _training_flags(model):
    """Every submodule's train/eval flag (module.training), in modules() order."""
    return [(m, m.training) for m in model.modules()]


def _set_training_flags(flags):
    for module, training in flags:
        module.training = training


class TrainingState:
    """Everything a speculative branch changes, kept in memory: model parameters and buffers (the
    non-persistent ones too, in buffers), the parameters' .grad (grads; None where none, the whole list
    None when the driver's restore_grads is False), every
    submodule's train/eval flag (training), optimizer state, LR scheduler state, the RNGs (torch,
    numpy, python, CUDA when present), the hook's error-feedback residuals (and its bucket-to-key
    map), and the step counter."""

    def __init__(self, step, model, optimizer, scheduler, rng, residuals, hook_layout, buffers=None,
                 grads=None, training=None):
        self.step = step
        self.model = model
        self.buffers = buffers
        self.grads = grads
        self.training = training
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.rng = rng
        self.residuals = residuals
        self.hook_layout = hook_layout


class AdaptivePrecision:
    """Adaptive precision for an existing DDP training loop with the AdaPrec hook: the AdaPrec
    controller's phases (adaprec-train's --format adaptive) around the user's own step and evaluation.

        state = adaprec.torch.HookState(format="fp32")
        model.register_comm_hook(state, adaprec.torch.hook)
        driver = adaprec.torch.AdaptivePrecision(model, optimizer, state, train_step, evaluate,
                                                 total_steps=1000, scheduler=scheduler)
        for step in driver.steps():      # was: for step in range(1000)
            train_step(step)

    Every continuation_steps or so (a phase), from the current state, each candidate format trains a
    branch of speculative_steps steps (train_step), evaluated eval_points times (evaluate), restoring
    the state between branches; the controller predicts each candidate's accuracy and training goes on
    from the chosen branch's end in its format (the hook's format is set), the other branches dropped.

    train_step(step): one optimizer step (forward, backward, optimizer.step(), scheduler.step()) on the
    batch of global step `step`: draw the batch from the step number, so that every branch of a phase
    sees the same batches. evaluate(): validation accuracy in [0, 1] (a fixed held-out set); the driver
    uses the ranks' mean (the value itself where all ranks return the same number, a sharded
    evaluation's accuracy where the shards are equal), raises the same error on every rank when one
    rank's value is not a number in [0, 1], and puts back the modules' train/eval flags after it.
    lr_schedule, optional: the learning-rate schedule over the driver's steps,
    passed to the controller at every phase (the rates from the phase's start to total_steps), whose
    predictor then fits the schedule-aware learning-curve model when they are not constant: a spec
    string in adaprec's forms (schedule_rates(), relative to the peak), a callable step -> rate, or
    "scheduler" to read the rates from `scheduler` itself (stepped forward from its current state and
    put back, see phase_learning_rates). learning_rate: the callable form's older name. Decisions are taken on every rank from the same numbers and rank 0's is followed
    (torch.distributed broadcast); records holds each decision's record (rank 0's log line).
    Residuals are dropped when a branch starts and at the decision, as in adaprec-train.

    candidates, speculative_steps, eval_points, probe_steps, contested_probe_steps: None takes the
    controller library's defaults, adaprec-train's (default_candidates(), controller_default(name);
    docs/python.md lists them).
    continuation_steps, max_overhead, rule, prune, min_speedup: as Controller's (None: the library's
    defaults). prune (default True), min_speedup, probe_steps: pruning as adaprec-train's (docs/trainer.md,
    "Pruning"): the first phase trains at most probe_steps steps of each candidate to measure its step
    time (fewer once its verdicts are settled, up to contested_probe_steps while it and another candidate
    faster than fp32 are not settled against each other; kept as the start of its branch); a candidate is not speculated when its step is not min_speedup
    faster than fp32's, when even accuracy 1 could not beat a faster branch already run, or when a more
    precise branch already run, predicted at its speed, scores no higher than the best branch run
    (branches run fastest first, then most bits first: Controller.branch_rank); a phase where only fp32 is left runs no branch and no evaluation, and records
    {"event": "speculation_skipped", ...} instead of a decision.

    restore_grads (default True): snapshots hold a copy of every parameter's .grad, as much memory again
    as the parameters, so that a loop accumulating gradients across steps starts every branch with the
    phase's gradients. A train_step that zeroes the gradients before its backward (the usual
    optimizer.zero_grad(); loss.backward(); optimizer.step()) never reads them: restore_grads=False
    leaves them out of snapshots and restore() leaves .grad as it is."""

    def __init__(self, model, optimizer, hook_state, train_step, evaluate, total_steps, scheduler=None,
                 candidates=None, speculative_steps=None, eval_points=None, continuation_steps=None,
                 max_overhead=None, rule=None, validation_images=0, steps_per_epoch=0, learning_rate=None,
                 lr_schedule=None, prune=None, min_speedup=None, probe_steps=None, contested_probe_steps=None,
                 restore_grads=True):
        # Left at None: the controller library's defaults, adaprec-train's (controller_default; until
        # 2026-12-08 the driver kept its own: 20 steps and 2 evaluations per branch against 30 and 3).
        candidates = default_candidates() if candidates is None else candidates
        speculative_steps = controller_default("speculative_steps") if speculative_steps is None else speculative_steps
        eval_points = controller_default("eval_points") if eval_points is None else eval_points
        probe_steps = controller_default("probe_steps") if probe_steps is None else probe_steps
        if contested_probe_steps is None:
            contested_probe_steps = controller_default("contested_probe_steps")
        if eval_points < 1 or speculative_steps < eval_points:
            raise adaprec.InvalidArgumentError(
                f"adaprec: speculative steps {speculative_steps} must be >= evaluation points {eval_points} >= 1")
        if learning_rate is not None and lr_schedule is not None:
            raise adaprec.InvalidArgumentError("adaprec: give lr_schedule or learning_rate (its older name), not both")
        lr_schedule = learning_rate if lr_schedule is None else lr_schedule
        if isinstance(lr_schedule, str):
            if lr_schedule == "scheduler":
                if scheduler is None:
                    raise adaprec.InvalidArgumentError('adaprec: lr_schedule="scheduler" needs scheduler=')
            else:
                schedule_rates(lr_schedule, 0, 0)  # a malformed spec fails here, not at the first phase
        elif lr_schedule is not None and not callable(lr_schedule):
            raise adaprec.InvalidArgumentError(
                f"adaprec: lr_schedule must be a spec string, \"scheduler\" or a callable step -> rate, "
                f"got {type(lr_schedule).__name__}")
        self.lr_schedule = lr_schedule
        if not isinstance(restore_grads, bool):
            raise adaprec.InvalidArgumentError(
                f"adaprec: restore_grads must be True or False, got {type(restore_grads).__name__}")
        self.restore_grads = restore_grads
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.hook_state = hook_state
        self.train_step = train_step
        self.evaluate = evaluate
        self.total_steps = int(total_steps)
        self.candidates = list(candidates)
        self.speculative_steps = int(speculative_steps)
        self._warn_if_schedule_ends_early()
        if not self._phase_fits(0):
            # Without a word such a run would be the hook's initial format's (fp32's) run, with no
            # decision and no record.
            warnings.warn(f"adaprec: AdaptivePrecision makes no decision: speculative_steps {self.speculative_steps} "
                          f"do not fit in total_steps {self.total_steps}; training stays in the hook's format",
                          stacklevel=2)
        self.eval_points = int(eval_points)
        if int(probe_steps) < 1:
            raise adaprec.InvalidArgumentError(f"adaprec: probe steps {probe_steps} must be >= 1")
        self.probe_steps = int(probe_steps)
        self.contested_probe_steps = int(contested_probe_steps)  # below probe_steps: never longer
        # Pruning: each candidate's step-time samples from its latest measurement (its probe steps or its
        # last branch; each the max over ranks) and their median.
        self.step_samples = {}
        self.step_seconds = {}
        self.controller = Controller(self.candidates, continuation_steps, max_overhead, total_steps,
                                     validation_images, steps_per_epoch, rule, prune, min_speedup)
        self.prune = self.controller.prune  # the controller's settings, its defaults filled in
        self.continuation_steps = self.controller.continuation_steps
        self.records = []          # one decision record (dict) per phase
        self.current = None        # the format training continues in
        self.next_phase = 0
        self.snapshot_seconds = 0.0  # time spent in snapshot() / restore(), and how often
        self.restore_seconds = 0.0
        self.snapshots = 0
        self.restores = 0

    # ---- the loop ----------------------------------------------------------------------------------
    def steps(self):
        """The regular steps' numbers; phases run in between (their branch steps are not yielded)."""
        step = 0
        while step < self.total_steps:
            if step >= self.next_phase and self._phase_fits(step):
                step = self.run_phase(step)
                if step >= self.total_steps:
                    return
            yield step
            step += 1

    def _warn_if_schedule_ends_early(self):
        """A spec string whose rate is 0 for good before total_steps (TOTAL counted in epochs, the driver's
        steps in steps) tells the predictor that every branch from there learns nothing: it forecasts them
        flat and the decisions rest on that. Said once; the callable and "scheduler" forms give the real rates."""
        if not isinstance(self.lr_schedule, str) or self.lr_schedule == "scheduler" or self.total_steps < 1:
            return
        # The library's answer (no scan of total_steps rates: 10**9 steps would have allocated 8 GB).
        zero = schedule_zero_from(self.lr_schedule)
        if zero >= self.total_steps:
            return
        warnings.warn(f"adaprec: lr_schedule {self.lr_schedule!r} reaches a rate of 0 at step {zero:g}, before "
                      f"total_steps {self.total_steps}: the predictor forecasts every branch from there as learning "
                      f"nothing; the spec counts the driver's steps, not epochs", stacklevel=3)

    def _phase_fits(self, step):
        """Whether a phase beginning at `step` has room for its branches before total_steps."""
        return step + self.speculative_steps <= self.total_steps

    def run_phase(self, start):
        """One phase from step `start`; returns the step training continues at (the chosen branch's end)."""
        base = self.snapshot(start)
        self.controller.begin_phase(start)
        rates = self.phase_learning_rates(start, self.total_steps - start + 1)
        if rates is not None:  # before any branch: pruning's verdicts use the schedule too
            self.controller.set_learning_rates(rates)
        at_base = True
        probed = {}  # candidate -> (state after its probe steps, their seconds)
        order = list(self.candidates)
        if self.prune:
            first_evaluation = self.speculative_steps // self.eval_points  # probe steps end by then
            probe = min(self.probe_steps, first_evaluation)
            # Beyond probe only while contested (AdaPrec_ControllerProbeContested), as adaprec-train's.
            contested_probe = max(probe, min(self.contested_probe_steps, first_evaluation))
            new = [c for c in self.candidates if c not in self.step_samples]
            # Interleaved, as adaprec-train's: one step of each candidate per round, each from its own
            # state, so that a disturbance lasting a few steps lands on several candidates' samples
            # rather than on all of one's (a snapshot per probe step: probe_steps x the candidates).
            # The first round in the candidates' order, the others fastest first, and a candidate whose
            # verdicts more samples could not change stops (AdaPrec_ControllerProbeSettled). The phase's
            # first step is no sample (it carries the run's one-off costs, and a candidate may settle on
            # one sample). Each sample is the max over ranks as it is taken, so every rank probes the
            # same steps.
            seconds = {c: [] for c in new}  # the samples, each reported to the controller as it is taken
            steps = {c: [] for c in new}  # every probe step's seconds, the first one's too
            for candidate in self.candidates:  # those an earlier phase measured
                if candidate not in seconds:
                    self.controller.report_step_samples(candidate, self.step_samples[candidate])
            for r in range(contested_probe):
                round_order = new if r == 0 else sorted(new, key=lambda c: _median(steps[c]))
                for candidate in round_order:
                    taken = len(steps[candidate])
                    if taken >= contested_probe:
                        continue
                    if seconds[candidate] and (not self.controller.probe_contested(candidate) if taken >= probe
                                               else self.controller.probe_settled(candidate)):
                        continue
                    if r == 0:
                        if not at_base:
                            self.restore(base)
                        self._apply(candidate)
                    else:
                        self.restore(probed[candidate][0])
                        self._apply(candidate, reset_feedback=False)  # the probe's own residuals
                    step = start + len(steps[candidate])
                    taken = self._agreed(self._train(step, step + 1))
                    if not (at_base and probe >= 2):
                        seconds[candidate] += taken
                        self.controller.report_step_samples(candidate, seconds[candidate])
                    steps[candidate] += taken
                    probed[candidate] = (self.snapshot(step + 1), seconds[candidate])
                    at_base = False
            for candidate in new:
                self._set_step_samples(candidate, seconds[candidate])
            for candidate in self.candidates:
                self.controller.report_step_samples(candidate, self.step_samples[candidate])
            order.sort(key=self.controller.branch_rank)  # adaprec-train's order (lib/controller/pruning.hpp)
            left = [c for c in order if self.controller.should_speculate(c)]
            if len(left) == 1:  # one candidate to choose (fp32, or fp16 standing in): no branch, no decision
                return self._skip_phase(start, base, left[0], probed)
        if not at_base:
            self.restore(base)
        base_accuracy = self._evaluate()
        ends = {}
        for candidate in order:
            if self.prune and not self.controller.should_speculate(candidate):
                continue
            if candidate in probed:
                state, seconds = probed[candidate]
                self.restore(state)
                self._apply(candidate, reset_feedback=False)  # the probe's residuals are the branch's
                step, seconds = state.step, list(seconds)
            else:
                # Always: evaluate() (or a branch before) may have drawn from the RNGs or changed state,
                # and every branch must start from the same one.
                self.restore(base)
                self._apply(candidate)
                step, seconds = start, []
            points = [(start, base_accuracy)]
            for k in range(1, self.eval_points + 1):
                until = start + self.speculative_steps * k // self.eval_points
                seconds += self._train(step, until)
                step = max(step, until)
                points.append((step, self._evaluate()))
            # The slowest rank sets a synchronous step's pace; the median drops one-off costs.
            per_step = self._set_step_samples(candidate, seconds)
            for p, (at, accuracy) in enumerate(points):
                self.controller.report(candidate, at, accuracy, per_step if p > 0 else 0.0)
            ends[candidate] = self.snapshot(step)
        decision = self.controller.decide()
        choice, continuation = self._agree(decision["candidate"], decision["continuation_steps"])
        record = self.controller.record()
        chosen = self.candidates[choice]
        record["choice"] = chosen  # rank 0's, followed by every rank
        self.records.append(record)
        self.restore(ends[chosen])
        self._apply(chosen)
        self.next_phase = ends[chosen].step + continuation
        return ends[chosen].step

    def _train(self, step, until):
        """Trains steps step .. until-1; returns each one's seconds on this rank."""
        import time

        seconds = []
        while step < until:
            t0 = time.perf_counter()
            self.train_step(step)
            seconds.append(time.perf_counter() - t0)
            step += 1
        return seconds

    def _skip_phase(self, start, base, choice, probed):
        """Pruning left only `choice` (fp32, or fp16 standing in for it): training goes on in it from
        its probe's end (those steps are training) or from the phase's start, and the next phase comes
        continuation_steps later."""
        if choice in probed:
            state = probed[choice][0]
            self.restore(state)
            self._apply(choice, reset_feedback=False)
        else:
            if probed:
                self.restore(base)
            state = base
            if self.current != choice:
                self._apply(choice)
        # As adaprec-train's record: each other candidate with the library's reason (no branch ran, so
        # none was dominated; fp32 may be stood in for by the choice).
        candidates = []
        for c in self.candidates:
            entry = {"name": c, "step_s": self.step_seconds[c], "samples_s": self.step_samples[c]}
            if c != choice:
                entry["pruned"] = self.controller.pruning_reason(c)
                if entry["pruned"] == "stood_in":
                    entry["stand_in"] = choice
            candidates.append(entry)
        self.records.append({"event": "speculation_skipped", "step": start, "choice": choice,
                             "candidates": candidates})
        self.next_phase = state.step + self.continuation_steps
        return state.step

    def phase_learning_rates(self, start, count):
        """The rates of updates start .. start+count-1 under lr_schedule (None without one). With
        "scheduler", call it where the scheduler has stepped `start` times (a phase's start): the rate
        of update start is the optimizer's current one (param group 0), then the scheduler is stepped
        count-1 times, reading each rate, and its state and the optimizer's param-group settings
        (lr, momentum, ...) are put back (state_dict). A scheduler whose step() needs arguments
        (ReduceLROnPlateau) cannot be read ahead: pass a spec or a callable instead."""
        schedule = self.lr_schedule
        if schedule is None:
            return None
        if callable(schedule):
            return [float(schedule(start + s)) for s in range(count)]
        if schedule != "scheduler":
            return schedule_rates(schedule, start, count)
        saved = _copied_state(self.scheduler.state_dict())
        groups = [{k: copy.deepcopy(v) for k, v in g.items() if k != "params"} for g in self.optimizer.param_groups]
        rates = [float(self.optimizer.param_groups[0]["lr"])]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "lr_scheduler.step() before optimizer.step()" at step 0
                for _ in range(count - 1):
                    self.scheduler.step()
                    rates.append(float(self.optimizer.param_groups[0]["lr"]))
        except TypeError as error:
            raise adaprec.InvalidArgumentError(
                f'adaprec: lr_schedule="scheduler" cannot step {type(self.scheduler).__name__} ahead ({error}); '
                "pass a spec or a callable") from None
        finally:
            self.scheduler.load_state_dict(saved)
            for group, settings in zip(self.optimizer.param_groups, groups):
                group.update(settings)
        return rates

    def _apply(self, candidate, reset_feedback=True):
        """The hook sends every bucket in `candidate` from the next step on; residuals start from zero
        (reset_feedback, a new branch) or stay those a restore brought back (a probed branch)."""
        self.hook_state.format = candidate
        if reset_feedback:
            self.hook_state.communicator.reset_feedback()
        self.current = candidate

    def _agreed(self, seconds):
        """Each of the seconds, the max over ranks (the slowest rank sets a synchronous step's pace)."""
        import torch.distributed as dist

        samples = [float(s) for s in seconds]
        if dist.is_initialized():
            t = torch.tensor(samples, dtype=torch.float64, device=_process_group_device())
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            samples = [float(x) for x in t.tolist()]
        return samples

    def _set_step_samples(self, candidate, seconds):
        """Keeps a candidate's step-time samples (each the max over ranks, so that every rank prunes on
        the same numbers); returns their median."""
        samples = self._agreed(seconds)
        self.step_samples[candidate] = samples
        self.step_seconds[candidate] = _median(samples)
        return self.step_seconds[candidate]

    def _evaluate(self):
        """evaluate() as every rank's decisions see it: the ranks' values gathered, checked (a number in
        [0, 1] on every rank, else the same error everywhere) and combined: the value when all ranks
        return the same one, else their mean in rank order (a sharded evaluation's accuracy when the
        shards are equal). The submodules' train/eval flags are put back afterwards."""
        import math

        import torch.distributed as dist

        flags = _training_flags(self.model)
        status, value, raised = 0.0, float("nan"), None  # status 0: a number, 1: float() failed, 2: raised
        try:
            result = self.evaluate()
            try:
                value = float(result)
            except (TypeError, ValueError, RuntimeError):
                status = 1.0
        except Exception as error:  # raised on this rank only: the others must not wait for it
            status, raised = 2.0, error
        finally:
            _set_training_flags(flags)
        pairs = [(status, value)]
        if dist.is_initialized():
            mine = torch.tensor([status, value], dtype=torch.float64, device=_process_group_device())
            gathered = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
            dist.all_gather(gathered, mine)
            pairs = [(float(t[0]), float(t[1])) for t in gathered]
        failed = [r for r, (st, _) in enumerate(pairs) if st == 2]
        if failed:
            if raised is not None:
                raise raised
            raise adaprec.PeerInvalidError(f"adaprec: evaluate() raised on rank(s) {failed}")
        bad = [f"rank {r} returned " + ("a value float() rejects" if st == 1 else repr(v))
               for r, (st, v) in enumerate(pairs) if st == 1 or not 0.0 <= v <= 1.0]  # NaN fails too
        if bad:
            raise adaprec.InvalidArgumentError(
                "adaprec: evaluate() must return an accuracy in [0, 1] on every rank: " + ", ".join(bad[:4])
                + (f" (and {len(bad) - 4} more)" if len(bad) > 4 else ""))
        values = [v for _, v in pairs]
        if all(v == values[0] for v in values):
            return values[0]  # exactly, where a mean of equal values could round
        return math.fsum(values) / len(values)

    def _agree(self, choice, continuation):
        import torch.distributed as dist

        if not dist.is_initialized():
            return int(choice), int(continuation)
        t = torch.tensor([int(choice), int(continuation)], dtype=torch.int64, device=_process_group_device())
        dist.broadcast(t, src=0)
        return int(t[0]), int(t[1])

    # ---- state -------------------------------------------------------------------------------------
    def _load_optimizer(self, saved):
        """optimizer.load_state_dict(saved) keeping the optimizer's param_groups list, its group dicts,
        its state dict and each parameter's state dict (load_state_dict makes new ones): a loop that
        holds a group (g = optimizer.param_groups[0]; g["lr"] = ...) must keep steering the optimizer."""

        optimizer = self.optimizer
        group_list, groups = optimizer.param_groups, list(optimizer.param_groups)
        per_param = optimizer.state
        entries = dict(per_param)
        # load_state_dict may keep the given tensors: hand over copies so the snapshot stays intact.
        optimizer.load_state_dict(copy.deepcopy(saved))
        for old, new in zip(groups, optimizer.param_groups):
            if old is not new:
                old.clear()
                old.update(new)  # new["params"] is old's list already
        group_list[:] = groups
        optimizer.param_groups = group_list
        loaded = optimizer.state
        if loaded is not per_param:
            per_param.clear()
            for p, entry in loaded.items():
                kept = entries.get(p)
                if kept is not None and kept is not entry:
                    kept.clear()
                    kept.update(entry)
                    entry = kept
                per_param[p] = entry
            optimizer.state = per_param

    def snapshot(self, step=0):
        """The whole training state at `step` (copies: later training does not change it)."""
        import random
        import time

        t0 = time.perf_counter()
        rng = {"torch": torch.get_rng_state(), "python": random.getstate()}
        try:
            import numpy

            rng["numpy"] = numpy.random.get_state()
        except ImportError:
            pass
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        hook = self.hook_state
        model = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        state = TrainingState(
            step,
            model,
            copy.deepcopy(self.optimizer.state_dict()),
            _copied_state(self.scheduler.state_dict()) if self.scheduler is not None else None,
            rng,
            hook.communicator.save_feedback(),
            (dict(hook._keys), dict(hook._places), hook._next_key, hook.format),
            # non-persistent buffers: state_dict() leaves them out
            {k: v.detach().clone() for k, v in self.model.named_buffers() if k not in model},
            # a loop that accumulates gradients over steps carries them across a phase's start
            [None if p.grad is None else p.grad.detach().clone() for p in self.model.parameters()]
            if self.restore_grads else None,
            _training_flags(self.model))
        self.snapshot_seconds += time.perf_counter() - t0
        self.snapshots += 1
        return state

    def restore(self, state):
        """Back to `state` exactly: a later restore of the same state gives the same training."""
        import random
        import time

        t0 = time.perf_counter()
        with torch.no_grad():
            self.model.load_state_dict(state.model)
            buffers = dict(self.model.named_buffers())
            for name, saved in (state.buffers or {}).items():
                now = buffers.get(name)
                if now is not None and now.shape == saved.shape and now.dtype == saved.dtype:
                    now.copy_(saved)  # in place: DDP and the module keep references to it
                else:
                    owner, _, leaf = name.rpartition(".")
                    setattr(self.model.get_submodule(owner), leaf, saved.clone())
            for p, saved in zip(self.model.parameters(), state.grads or []):
                if saved is None:
                    p.grad = None
                elif p.grad is not None and p.grad.shape == saved.shape and p.grad.dtype == saved.dtype:
                    p.grad.copy_(saved)  # in place: DDP's gradient_as_bucket_view grads are bucket views
                else:
                    p.grad = saved.clone()
        _set_training_flags(state.training or [])
        self._load_optimizer(state.optimizer)
        if self.scheduler is not None:
            self.scheduler.load_state_dict(_copied_state(state.scheduler))
        torch.set_rng_state(state.rng["torch"])
        random.setstate(state.rng["python"])
        if "numpy" in state.rng:
            import numpy

            numpy.random.set_state(state.rng["numpy"])
        if "cuda" in state.rng:
            torch.cuda.set_rng_state_all(state.rng["cuda"])
        hook = self.hook_state
        hook.communicator.load_feedback(state.residuals)
        keys, places, next_key, fmt = state.hook_layout
        hook._keys, hook._places, hook._next_key, hook.format = dict(keys), dict(places), next_key, fmt
        self.restore_seconds += time.perf_counter() - t0
        self.restores += 1
