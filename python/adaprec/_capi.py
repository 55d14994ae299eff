"""ctypes declarations of libadaprec's explicit-communicator C API (include/adaprec/adaprec_mpi.h).

The library is found, in this order, at $ADAPREC_LIBRARY, at the path recorded when the package was
installed (meson install), or by the dynamic linker's search (ctypes.util.find_library)."""

import ctypes
import ctypes.util
import os

OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_MALFORMED_INPUT = 2
ERR_MISMATCH = 3
ERR_UNSUPPORTED = 4
ERR_TRANSPORT = 5
ERR_IO = 6
ERR_INTERNAL = 7
ERR_CUDA = 8
ERR_PEER_INVALID = 9

CHECK_AGREEMENT = 1
LOCAL_INVALID = 2


class CallStats(ctypes.Structure):
    _fields_ = [
        ("algorithm", ctypes.c_char * 24),
        ("format", ctypes.c_char * 24),
        ("count", ctypes.c_uint64),
        ("wireBytes", ctypes.c_uint64),
        ("fp32Bytes", ctypes.c_uint64),
        ("encodeSeconds", ctypes.c_double),
        ("decodeSeconds", ctypes.c_double),
        ("transferSeconds", ctypes.c_double),
        ("totalSeconds", ctypes.c_double),
    ]


def _library_path():
    explicit = os.environ.get("ADAPREC_LIBRARY")
    if explicit:
        return explicit
    try:
        from . import _install_paths  # written by meson install

        if os.path.exists(_install_paths.LIBRARY):
            return _install_paths.LIBRARY
    except ImportError:
        pass
    found = ctypes.util.find_library("adaprec")
    if found:
        return found
    raise ImportError(
        "adaprec: libadaprec.so not found; install AdaPrec (meson install) or set "
        "ADAPREC_LIBRARY=/path/to/libadaprec.so"
    )


def _declare(lib):
    c_comm = ctypes.c_void_p
    P = ctypes.POINTER
    signatures = {
        "AdaPrec_LastError": (ctypes.c_char_p, []),
        "AdaPrec_CommCreate": (ctypes.c_int, [ctypes.c_void_p, P(c_comm)]),
        "AdaPrec_CommFree": (ctypes.c_int, [c_comm]),
        "AdaPrec_CommRank": (ctypes.c_int, [c_comm, P(ctypes.c_int)]),
        "AdaPrec_CommSize": (ctypes.c_int, [c_comm, P(ctypes.c_int)]),
        "AdaPrec_CommAllreduce": (
            ctypes.c_int,
            [c_comm, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_char_p,
             ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int, P(CallStats)],
        ),
        "AdaPrec_HasCuda": (ctypes.c_int, []),
        "AdaPrec_CommAllreduceDevice": (
            ctypes.c_int,
            [c_comm, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_char_p,
             ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int, P(CallStats),
             ctypes.c_void_p],
        ),
        "AdaPrec_CommSaveFeedback": (
            ctypes.c_int, [c_comm, ctypes.c_void_p, ctypes.c_size_t, P(ctypes.c_size_t)]),
        "AdaPrec_CommLoadFeedback": (ctypes.c_int, [c_comm, ctypes.c_char_p, ctypes.c_size_t]),
        "AdaPrec_CommResetFeedback": (ctypes.c_int, [c_comm, ctypes.c_char_p]),
        "AdaPrec_CommFeedbackInfo": (
            ctypes.c_int,
            [c_comm, ctypes.c_char_p, P(ctypes.c_uint64), P(ctypes.c_uint64), ctypes.c_char_p,
             ctypes.c_size_t],
        ),
        "AdaPrec_CommGetFeedback": (
            ctypes.c_int, [c_comm, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_uint64]),
        "AdaPrec_CommSetFeedback": (
            ctypes.c_int,
            [c_comm, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_uint64,
             ctypes.c_void_p],
        ),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    return lib


lib = _declare(ctypes.CDLL(_library_path()))


# ---- The precision controller (libadaprec_controller, AdaPrec_Controller* in adaprec_mpi.h) -------
# Its own library (it needs the learning-curve predictor), loaded on first use from beside libadaprec:
# the same directory once installed, lib/controller/ under it in a build tree.

RULE_GAIN = 0
RULE_RISK = 1


class ControllerOptions(ctypes.Structure):
    _fields_ = [
        ("continuationSteps", ctypes.c_uint64),
        ("maxOverhead", ctypes.c_double),
        ("totalSteps", ctypes.c_uint64),
        ("validationImages", ctypes.c_uint64),
        ("stepsPerEpoch", ctypes.c_double),
        ("rule", ctypes.c_int),
        ("prune", ctypes.c_int),
        ("minSpeedup", ctypes.c_double),
    ]


class Decision(ctypes.Structure):
    _fields_ = [
        ("format", ctypes.c_char * 64),
        ("candidate", ctypes.c_uint64),
        ("predictedMean", ctypes.c_double),
        ("predictedSd", ctypes.c_double),
        ("predictedStep", ctypes.c_uint64),
        ("continuationSteps", ctypes.c_uint64),
    ]


def _controller_library_path():
    directory = os.path.dirname(os.path.realpath(lib._name)) if os.path.sep in lib._name else ""
    # .so.0 after meson install, unversioned inside a pip-installed package, controller/ in a build tree.
    for candidate in (os.path.join(directory, "libadaprec_controller.so.0"),
                      os.path.join(directory, "libadaprec_controller.so"),
                      os.path.join(directory, "controller", "libadaprec_controller.so.0")):
        if directory and os.path.exists(candidate):
            return candidate
    found = ctypes.util.find_library("adaprec_controller")
    if found:
        return found
    raise ImportError(
        f"adaprec: libadaprec_controller.so not found beside {lib._name}; install AdaPrec with its "
        "controller (meson install)")


_controller = None


def controller_lib():
    """libadaprec_controller with its signatures declared (loaded on the first call)."""
    global _controller
    if _controller is None:
        P = ctypes.POINTER
        c_ctrl = ctypes.c_void_p
        signatures = {
            "AdaPrec_ControllerLastError": (ctypes.c_char_p, []),
            "AdaPrec_ControllerDefaultOptions": (None, [P(ControllerOptions)]),
            "AdaPrec_ControllerDefault": (ctypes.c_int, [ctypes.c_char_p, P(ctypes.c_double)]),
            "AdaPrec_ControllerDefaultCandidates": (
                ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t, P(ctypes.c_size_t)]),
            "AdaPrec_ControllerCreate": (
                ctypes.c_int, [P(ctypes.c_char_p), ctypes.c_size_t, P(ControllerOptions), P(c_ctrl)]),
            "AdaPrec_ControllerFree": (ctypes.c_int, [c_ctrl]),
            "AdaPrec_ControllerBeginPhase": (ctypes.c_int, [c_ctrl, ctypes.c_uint64]),
            "AdaPrec_ControllerReportPoint": (
                ctypes.c_int, [c_ctrl, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_double, ctypes.c_double]),
            "AdaPrec_ControllerSetLearningRates": (ctypes.c_int, [c_ctrl, P(ctypes.c_double), ctypes.c_size_t]),
            "AdaPrec_ControllerScheduleRates": (
                ctypes.c_int, [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_size_t, P(ctypes.c_double)]),
            "AdaPrec_ControllerScheduleZeroFrom": (ctypes.c_int, [ctypes.c_char_p, P(ctypes.c_double)]),
            "AdaPrec_ControllerReportStepTime": (ctypes.c_int, [c_ctrl, ctypes.c_char_p, ctypes.c_double]),
            "AdaPrec_ControllerReportStepSamples": (ctypes.c_int, [c_ctrl, ctypes.c_char_p,
                                                                   P(ctypes.c_double), ctypes.c_size_t]),
            "AdaPrec_ControllerProbeSettled": (ctypes.c_int, [c_ctrl, ctypes.c_char_p, P(ctypes.c_int)]),
            "AdaPrec_ControllerProbeContested": (ctypes.c_int, [c_ctrl, ctypes.c_char_p, P(ctypes.c_int)]),
            "AdaPrec_ControllerShouldSpeculate": (ctypes.c_int, [c_ctrl, ctypes.c_char_p, P(ctypes.c_int)]),
            "AdaPrec_ControllerBranchRank": (ctypes.c_int, [c_ctrl, ctypes.c_char_p, P(ctypes.c_size_t)]),
            "AdaPrec_ControllerPruningReason": (
                ctypes.c_int, [c_ctrl, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, P(ctypes.c_size_t)]),
            "AdaPrec_ControllerDecide": (ctypes.c_int, [c_ctrl, P(Decision)]),
            "AdaPrec_ControllerDecisionRecord": (
                ctypes.c_int, [c_ctrl, ctypes.c_char_p, ctypes.c_size_t, P(ctypes.c_size_t)]),
        }
        loaded = ctypes.CDLL(_controller_library_path())
        for name, (restype, argtypes) in signatures.items():
            function = getattr(loaded, name)
            function.restype = restype
            function.argtypes = argtypes
        _controller = loaded
    return _controller
