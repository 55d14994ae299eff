"""The precision controller's decision for any training loop, without PyTorch: `Controller` (the
AdaPrec_Controller* C API of libadaprec_controller over ctypes) and `schedule_rates` (the library's
learning-rate schedule forms). adaprec.torch re-exports both and builds its DDP driver,
AdaptivePrecision, on them; a JAX, TensorFlow or numpy loop imports them from here (no torch import).

    from adaprec.controller import Controller
    c = Controller(["fp32", "fp16", "table4"], total_steps=10000)
    c.begin_phase(step)
    c.report("fp16", step, accuracy, seconds_per_step)   # every point of every branch
    choice = c.decide()["format"]
"""

import adaprec

__all__ = ["Controller", "controller_default", "default_candidates", "schedule_rates", "schedule_zero_from"]


def _whole(name, value, least=0):
    """value as an int >= least, else adaprec.InvalidArgumentError naming the argument (the C API takes
    unsigned integers: a negative one wrapped around, and a negative count crashed)."""
    from . import _capi

    if isinstance(value, bool) or int(value) != value or value < least or value >= 2**64:
        raise adaprec.InvalidArgumentError(f"adaprec: {name} must be an integer from {least} to 2^64-1, "
                                           f"got {value!r}", _capi.ERR_INVALID_ARGUMENT)
    return int(value)


def schedule_rates(spec, first, count):
    """The learning-rate schedule `spec` relative to its peak at steps first .. first+count-1, parsed and
    evaluated by the library (AdaPrec_ControllerScheduleRates: the forms of adaprec-train and
    adaprec-predict --lr-schedule, constant, cosine:TOTAL, cosine:TOTAL:WARMUP, poly:TOTAL:POWER,
    step:GAMMA:S1,S2,..., file:PATH). A malformed spec raises adaprec.InvalidArgumentError (one line)."""
    import ctypes

    from . import _capi

    first, count = _whole("first", first), _whole("count", count)
    lib = _capi.controller_lib()
    rates = (ctypes.c_double * max(count, 1))()
    _check(lib, lib.AdaPrec_ControllerScheduleRates(_spec_bytes(spec), first, count, rates))
    return list(rates[:int(count)])


def schedule_zero_from(spec):
    """The first step from which the schedule `spec`'s rate is 0 for good (the library's
    AdaPrec_ControllerScheduleZeroFrom: TOTAL for cosine and poly, the start of a file: schedule's final
    zeros), math.inf where it never reaches 0. A malformed spec raises adaprec.InvalidArgumentError."""
    import ctypes

    from . import _capi

    lib = _capi.controller_lib()
    step = ctypes.c_double()
    _check(lib, lib.AdaPrec_ControllerScheduleZeroFrom(_spec_bytes(spec), ctypes.byref(step)))
    return step.value


def controller_default(name):
    """The library's default of a setting the driver applies around the controller (the C API's
    AdaPrec_ControllerDefault, which adaprec-train's options share): "speculative_steps",
    "eval_points", "probe_steps", "contested_probe_steps", "first_phase_step", "validation_images",
    "continuation_steps", "max_overhead", "min_speedup", "max_continuation_doublings". An int for the
    counts, a float for the fractions; another name raises adaprec.InvalidArgumentError listing them."""
    import ctypes

    from . import _capi

    lib = _capi.controller_lib()
    value = ctypes.c_double()
    _check(lib, lib.AdaPrec_ControllerDefault(str(name).encode(), ctypes.byref(value)))
    return value.value if name in ("max_overhead", "min_speedup") else int(value.value)


def default_candidates():
    """The library's default candidate formats (adaprec-train's --candidates), as a list."""
    import ctypes

    from . import _capi

    lib = _capi.controller_lib()
    size = ctypes.c_size_t()
    _check(lib, lib.AdaPrec_ControllerDefaultCandidates(None, 0, ctypes.byref(size)))
    text = ctypes.create_string_buffer(size.value + 1)
    _check(lib, lib.AdaPrec_ControllerDefaultCandidates(text, size.value + 1, ctypes.byref(size)))
    return text.value.decode().split(",")


def _spec_bytes(spec):
    """A schedule spec for the C API: a NUL would cut it short there, so it is refused here."""
    from . import _capi

    if "\0" in str(spec):
        raise adaprec.InvalidArgumentError(f"adaprec: lr schedule {str(spec)!r} contains a NUL character",
                                           _capi.ERR_INVALID_ARGUMENT)
    return str(spec).encode()


def _check(lib, code):
    """Raises the library's last error as the adaprec exception of its code."""
    from . import _capi

    if code != _capi.OK:
        message = lib.AdaPrec_ControllerLastError().decode(errors="replace")
        raise adaprec._ERRORS.get(code, adaprec.AdaPrecError)(message, code)


class Controller:
    """The precision controller's decision (libadaprec_controller's C API, AdaPrec_Controller*): for
    each phase, report every candidate branch's points, then decide. No MPI inside: give every rank
    the same numbers (seconds per step as the maximum over ranks) and each decides the same.

    candidates: format specs; continuation_steps, max_overhead, rule ("gain" | "risk"), prune,
    min_speedup: as adaprec-train's --phase-steps, --max-overhead, --rule, --no-prune, --min-speedup,
    None keeping the library's default (AdaPrec_ControllerDefaultOptions: 300, 0.1, "gain", True,
    0.10); total_steps: where training ends (0: unknown); validation_images: images behind each
    accuracy (0: unknown); steps_per_epoch: for the record's epoch only."""

    def __init__(self, candidates, continuation_steps=None, max_overhead=None, total_steps=0,
                 validation_images=0, steps_per_epoch=0, rule=None, prune=None, min_speedup=None):
        import ctypes

        from . import _capi

        self._lib = _capi.controller_lib()
        self._capi = _capi
        if rule not in (None, "gain", "risk"):
            raise adaprec.InvalidArgumentError(f"adaprec: unknown decision rule {rule!r} (valid: gain, risk)",
                                               _capi.ERR_INVALID_ARGUMENT)
        self.candidates = [str(c) for c in candidates]
        options = _capi.ControllerOptions()
        self._lib.AdaPrec_ControllerDefaultOptions(ctypes.byref(options))
        # The library's defaults stay wherever an argument is None: declared once, in the C API.
        if continuation_steps is not None:
            options.continuationSteps = _whole("continuation_steps", continuation_steps, 1)
        if max_overhead is not None:
            options.maxOverhead = float(max_overhead)
        options.totalSteps = _whole("total_steps", total_steps or 0)
        options.validationImages = _whole("validation_images", validation_images or 0)
        options.stepsPerEpoch = float(steps_per_epoch or 0)
        if rule is not None:
            options.rule = _capi.RULE_RISK if rule == "risk" else _capi.RULE_GAIN
        if prune is not None:
            options.prune = 1 if prune else 0
        if min_speedup is not None:
            options.minSpeedup = float(min_speedup)
        # The settings in effect (the library's defaults filled in), for drivers that act on them.
        self.continuation_steps = int(options.continuationSteps)
        self.max_overhead = float(options.maxOverhead)
        self.prune = bool(options.prune)
        self.min_speedup = float(options.minSpeedup)
        names = (ctypes.c_char_p * len(self.candidates))(*[c.encode() for c in self.candidates])
        handle = ctypes.c_void_p()
        self._check(self._lib.AdaPrec_ControllerCreate(names, len(self.candidates), ctypes.byref(options),
                                                       ctypes.byref(handle)))
        self._handle = handle

    def _check(self, code):
        _check(self._lib, code)

    def close(self):
        if getattr(self, "_handle", None):
            self._check(self._lib.AdaPrec_ControllerFree(self._handle))
            self._handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def begin_phase(self, step):
        self._check(self._lib.AdaPrec_ControllerBeginPhase(self._handle, int(step)))

    def report(self, candidate, step, accuracy, seconds_per_step):
        self._check(self._lib.AdaPrec_ControllerReportPoint(self._handle, str(candidate).encode(), int(step),
                                                            float(accuracy), float(seconds_per_step)))

    def report_step_time(self, candidate, seconds_per_step):
        """Pruning: a candidate's measured seconds per step, before any branch of the phase."""
        self._check(self._lib.AdaPrec_ControllerReportStepTime(self._handle, str(candidate).encode(),
                                                               float(seconds_per_step)))

    def report_step_samples(self, candidate, seconds):
        """Pruning: a candidate's measured seconds of each probe step (each the max over ranks), before
        any branch of the phase; the not_faster verdict weighs the gap against their spread."""
        import ctypes

        values = [float(x) for x in seconds]
        array = (ctypes.c_double * len(values))(*values)
        self._check(self._lib.AdaPrec_ControllerReportStepSamples(self._handle, str(candidate).encode(), array,
                                                                  len(values)))

    def _ask(self, function, candidate, answer):
        """One question about a candidate: function(handle, name, &answer); returns answer.value."""
        import ctypes

        self._check(function(self._handle, str(candidate).encode(), ctypes.byref(answer)))
        return answer.value

    def probe_settled(self, candidate):
        """Pruning: whether the candidate's probe may stop, its verdicts settled by the samples reported
        so far (report_step_samples after each probe step; see AdaPrec_ControllerProbeSettled)."""
        import ctypes

        return bool(self._ask(self._lib.AdaPrec_ControllerProbeSettled, candidate, ctypes.c_int(0)))

    def probe_contested(self, candidate):
        """Pruning: whether the candidate may probe beyond probe_steps (up to contested_probe_steps): it
        and another candidate can both pay and their test is not settled (AdaPrec_ControllerProbeContested)."""
        import ctypes

        return bool(self._ask(self._lib.AdaPrec_ControllerProbeContested, candidate, ctypes.c_int(0)))

    def should_speculate(self, candidate):
        """Pruning: whether the candidate's branch is worth running now (False: pruned this phase)."""
        import ctypes

        return bool(self._ask(self._lib.AdaPrec_ControllerShouldSpeculate, candidate, ctypes.c_int(0)))

    def branch_rank(self, candidate):
        """Pruning: the candidate's place (0: first) in the order to run the branches in: the fastest
        candidate not pruned first, then most bits per value first, fp16 before fp32
        (AdaPrec_ControllerBranchRank). Needs every candidate's step time."""
        import ctypes

        return int(self._ask(self._lib.AdaPrec_ControllerBranchRank, candidate, ctypes.c_size_t(0)))

    def pruning_reason(self, candidate):
        """Why should_speculate said no to the candidate in this phase ("not_faster", "dominated",
        "bounded", "stood_in"), or "" (not asked, or speculated)."""
        import ctypes

        size = ctypes.c_size_t()
        name = str(candidate).encode()
        self._check(self._lib.AdaPrec_ControllerPruningReason(self._handle, name, None, 0, ctypes.byref(size)))
        buffer = ctypes.create_string_buffer(size.value + 1)
        self._check(self._lib.AdaPrec_ControllerPruningReason(self._handle, name, buffer, size.value + 1,
                                                              ctypes.byref(size)))
        return buffer.value.decode()

    def set_learning_rates(self, rates):
        import ctypes

        array = (ctypes.c_double * len(rates))(*[float(r) for r in rates])
        self._check(self._lib.AdaPrec_ControllerSetLearningRates(self._handle, array, len(rates)))

    def decide(self):
        """-> dict(format, candidate, predicted_mean, predicted_sd, predicted_step, continuation_steps)."""
        import ctypes

        d = self._capi.Decision()
        self._check(self._lib.AdaPrec_ControllerDecide(self._handle, ctypes.byref(d)))
        return {"format": d.format.decode(), "candidate": d.candidate, "predicted_mean": d.predictedMean,
                "predicted_sd": d.predictedSd, "predicted_step": d.predictedStep,
                "continuation_steps": d.continuationSteps}

    def record(self):
        """The last decision's record (adaprec-train's "event":"decision" log line) as a dict."""
        import ctypes
        import json

        size = ctypes.c_size_t()
        self._check(self._lib.AdaPrec_ControllerDecisionRecord(self._handle, None, 0, ctypes.byref(size)))
        buffer = ctypes.create_string_buffer(size.value + 1)
        self._check(self._lib.AdaPrec_ControllerDecisionRecord(self._handle, buffer, size.value + 1,
                                                               ctypes.byref(size)))
        return json.loads(buffer.value.decode())
