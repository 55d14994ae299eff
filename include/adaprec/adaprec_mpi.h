/* AdaPrec C API for MPI programs: a drop-in for MPI_Allreduce with the same signature.
 *
 * MPI_FLOAT + MPI_SUM (including MPI_IN_PLACE) of at least ADAPREC_MIN_BYTES bytes goes through the
 * compressed allreduce with the format of ADAPREC_FORMAT (default fp32) and the algorithm of
 * ADAPREC_ALGO (default auto); every other call goes to PMPI_Allreduce unchanged, so it behaves exactly
 * like plain MPI. Invalid environment values print one error line naming the variable and its valid
 * values and call MPI_Abort: the first call on each intracommunicator (whatever its type) agrees on
 * that across the communicator's ranks in one tiny extra allreduce, so the job stops at once whichever
 * ranks hold the value (under the preload library MPI_Init does it instead). No C++ exception ever
 * crosses this API. libadaprec-preload.so exports
 * MPI_Allreduce on top of this, so unmodified programs can use it through LD_PRELOAD. */
#ifndef ADAPREC_ADAPREC_MPI_H
#define ADAPREC_ADAPREC_MPI_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Same contract and return values as MPI_Allreduce (MPI_SUCCESS or an MPI error class). Erroneous
 * buffer arguments (recvbuf MPI_IN_PLACE, sendbuf equal to recvbuf) go to PMPI_Allreduce untouched,
 * so they get the MPI library's own answer. */
int AdaPrec_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                      MPI_Comm comm);

/* Counters of this process since start (or the last reset). */
typedef struct AdaPrec_Stats {
  uint64_t intercepted;  /* calls served by the compressed allreduce */
  uint64_t passedThrough; /* calls forwarded to PMPI_Allreduce */
  uint64_t fp32Bytes;    /* bytes the intercepted calls would have sent in fp32 (same algorithm) */
  uint64_t wireBytes;    /* bytes the intercepted calls sent */
  double seconds;        /* wall time inside intercepted calls */
} AdaPrec_Stats;

void AdaPrec_GetStats(AdaPrec_Stats *stats);
void AdaPrec_ResetStats(void);

/* Collective over MPI_COMM_WORLD: sums every rank's counters and, on rank 0, prints one line to
 * stderr. The preload library calls it from MPI_Finalize when any rank sets ADAPREC_STATS=1; a
 * program linking this API directly calls it itself (on every rank) before MPI_Finalize. */
void AdaPrec_PrintStats(void);

/* ---- Explicit communicators: the API for language bindings (the Python module uses it) ----------
 *
 * Unlike AdaPrec_Allreduce, these calls take every choice as an argument, report errors as a return
 * code plus a message instead of MPI error handlers, and keep error-feedback state per named tensor.
 * Return value: ADAPREC_OK (0) or one of the ADAPREC_ERR_* codes; AdaPrec_LastError() then gives a
 * one-line message (per thread, valid until this thread's next call). */
#define ADAPREC_OK 0
#define ADAPREC_ERR_INVALID_ARGUMENT 1
#define ADAPREC_ERR_MALFORMED_INPUT 2
#define ADAPREC_ERR_MISMATCH 3
#define ADAPREC_ERR_UNSUPPORTED 4
#define ADAPREC_ERR_TRANSPORT 5
#define ADAPREC_ERR_IO 6
#define ADAPREC_ERR_INTERNAL 7
#define ADAPREC_ERR_CUDA 8
/* Another rank passed ADAPREC_LOCAL_INVALID: nothing was reduced anywhere. */
#define ADAPREC_ERR_PEER_INVALID 9

/* AdaPrec_CommAllreduce flags. */
/* Before any data moves, all ranks compare count, format, algorithm, averaging and whether a key was
 * given (one 3-word MPI allreduce), so a mismatch or a peer's invalid input becomes
 * ADAPREC_ERR_MISMATCH / ADAPREC_ERR_PEER_INVALID on every rank instead of a hang. Without it a
 * disagreement still gives ADAPREC_ERR_MISMATCH (the library's own 2-word check, also before the native
 * path), but a peer's invalid input is not reported. After MPI_Finalize (or before MPI_Init),
 * AdaPrec_CommCreate and AdaPrec_CommAllreduce return ADAPREC_ERR_TRANSPORT. */
#define ADAPREC_CHECK_AGREEMENT 1
/* This rank's input is unusable (the binding found a wrong dtype, say): take part in the agreement
 * and fail with ADAPREC_ERR_INVALID_ARGUMENT here and ADAPREC_ERR_PEER_INVALID elsewhere. Buffers and
 * count are ignored. Implies ADAPREC_CHECK_AGREEMENT. */
#define ADAPREC_LOCAL_INVALID 2

typedef struct AdaPrec_CommObject *AdaPrec_Comm;

/* What one allreduce did (adaprec::AllreduceStats). Names are NUL-terminated. */
typedef struct AdaPrec_CallStats {
  char algorithm[24];      /* what ran (auto resolved) */
  char format[24];         /* wire format used */
  uint64_t count;          /* elements reduced */
  uint64_t wireBytes;      /* bytes this rank sent */
  uint64_t fp32Bytes;      /* bytes this rank would have sent in fp32, same algorithm */
  double encodeSeconds;
  double decodeSeconds;
  double transferSeconds;
  double totalSeconds;
} AdaPrec_CallStats;

const char *AdaPrec_LastError(void);

/* Collective over comm (MPI must be initialised): an AdaPrec communicator on a duplicate of comm. */
int AdaPrec_CommCreate(MPI_Comm comm, AdaPrec_Comm *out);
/* Collective (frees the duplicate). NULL is accepted. */
int AdaPrec_CommFree(AdaPrec_Comm comm);
int AdaPrec_CommRank(AdaPrec_Comm comm, int *rank);
int AdaPrec_CommSize(AdaPrec_Comm comm, int *size);

/* Sum of every rank's `count` floats. send == recv (or send NULL) means in place. format: a format spec
 * ("fp8s", "table1+ef", "fastest"); algo: an algorithm name ("auto", "twoshot", ...); average: divide
 * by the rank count; key: the tensor's name, required with "+ef" (its error-feedback state); flags:
 * ADAPREC_CHECK_AGREEMENT | ADAPREC_LOCAL_INVALID. stats may be NULL. */
int AdaPrec_CommAllreduce(AdaPrec_Comm comm, const float *send, float *recv, int64_t count,
                          const char *format, const char *algo, int average, const char *key,
                          int flags, AdaPrec_CallStats *stats);

/* 1 when this libadaprec was built with CUDA (meson -Dcuda=enabled, or the default -Dcuda=auto with
 * nvcc found); else 0, and AdaPrec_LastError() then says how to build it with CUDA. Says nothing about
 * whether a GPU is present: AdaPrec_CommAllreduceDevice reports that (ADAPREC_ERR_CUDA). */
int AdaPrec_HasCuda(void);

/* AdaPrec_CommAllreduce on CUDA device memory: send and recv are device pointers of the current CUDA
 * device (cudaGetDevice), stream a cudaStream_t of that device (NULL: the legacy default stream, what
 * torch.cuda.current_stream().cuda_stream is for the default stream). Arguments, flags, stats and
 * results are those of AdaPrec_CommAllreduce; the wire is the same, so a rank may reduce host memory
 * while another reduces device memory in the same call.
 *
 * Ordering: the call's device work (the codec kernels, the copies of encoded chunks between device
 * scratch and the host buffers MPI sends and receives, the copy send -> recv, the averaging) is queued
 * on `stream`, after whatever the caller queued there before the call. The calling thread blocks: the
 * call synchronizes `stream` (cudaStreamSynchronize) whenever it stages chunks through host memory
 * and once more before it returns. So on return the result is in recv and everything queued on
 * `stream` before the call has completed too. Other streams are neither waited for nor ordered: work
 * on another stream that writes send or reads recv must be ordered by the caller (an event).
 *
 * Before the agreement round (so, with ADAPREC_CHECK_AGREEMENT, every rank learns of a failure as of
 * any invalid argument: this rank gets the code below, the others ADAPREC_ERR_PEER_INVALID, and
 * nothing is reduced anywhere) each rank checks that it can run the call: ADAPREC_ERR_UNSUPPORTED in a
 * build without CUDA (the message says how to build with it); ADAPREC_ERR_CUDA with the CUDA
 * runtime's reason when there is no usable device (a CUDA build on a machine without a GPU or driver)
 * or `stream` reports an error of earlier work; ADAPREC_ERR_INVALID_ARGUMENT when send or recv is not
 * memory of the current device. Without ADAPREC_CHECK_AGREEMENT such a failure is reported on its
 * rank only, like any invalid argument of AdaPrec_CommAllreduce. A CUDA error after the round (a
 * kernel fault) fails the call there like a transport fault inside the algorithm: with ADAPREC_TIMEOUT
 * set the other ranks time out or fail in the completion vote; without it they may wait.
 *
 * The communicator keeps one device codec per stream it was given (created on first use, kept until
 * AdaPrec_CommFree; error-feedback residuals of a "+ef" key live in device memory on that stream
 * between calls): every stream passed here must stay valid until AdaPrec_CommFree. Host calls
 * (AdaPrec_CommAllreduce) on the same communicator stay host calls; a key's residuals move between
 * host and device memory when a key switches. */
int AdaPrec_CommAllreduceDevice(AdaPrec_Comm comm, const float *send, float *recv, int64_t count,
                                const char *format, const char *algo, int average, const char *key,
                                int flags, AdaPrec_CallStats *stats, void *stream);

/* Error-feedback state (adaprec::Communicator). Save: writes the versioned blob into out when
 * capacity suffices and always sets *size to its length (call with out NULL to ask). Load replaces
 * all state. Reset: one key, or every key when key is NULL. */
int AdaPrec_CommSaveFeedback(AdaPrec_Comm comm, void *out, size_t capacity, size_t *size);
int AdaPrec_CommLoadFeedback(AdaPrec_Comm comm, const void *bytes, size_t size);
int AdaPrec_CommResetFeedback(AdaPrec_Comm comm, const char *key);
/* One key's residuals, to move them when tensors are regrouped. Info sets *count and *slots (0 and 0
 * for an unknown key) and copies the resolved algorithm's name into algo[algoCapacity]. Get copies
 * slot `slot` (zeros for a slot the algorithm never used). Set replaces the key's state with `slots`
 * slots of `count` floats stored one after another in data. */
int AdaPrec_CommFeedbackInfo(AdaPrec_Comm comm, const char *key, uint64_t *count, uint64_t *slots,
                             char *algo, size_t algoCapacity);
int AdaPrec_CommGetFeedback(AdaPrec_Comm comm, const char *key, uint64_t slot, float *out,
                            uint64_t count);
int AdaPrec_CommSetFeedback(AdaPrec_Comm comm, const char *key, const char *algo, uint64_t count,
                            uint64_t slots, const float *data);

/* ---- The precision controller (libadaprec_controller): adaptive precision for any trainer -------
 *
 * The decision adaprec-train's `--format adaptive` makes, for a trainer that runs its own speculative
 * branches (docs/trainer.md, "The controller as a library"). Per phase: from one training state, the
 * trainer trains a short branch in each candidate format (restoring the state between branches),
 * evaluates each branch a few times on a fixed validation set, and reports the points; the controller
 * fits the learning curves jointly, predicts each candidate's accuracy at the end of the continuation
 * it would get, and answers the format to continue with (the best predicted accuracy gain per second),
 * its predicted accuracy (mean, sd), how many steps to continue before the next phase, and the
 * decision record as JSON (adaprec-train's "event":"decision" log line). The controller needs no MPI:
 * give it the same numbers on every rank (seconds per step as the maximum over ranks) and it decides
 * the same on every rank.
 *
 * Return values: ADAPREC_OK or ADAPREC_ERR_* above; AdaPrec_ControllerLastError() then gives a
 * one-line message (per thread, valid until this thread's next AdaPrec_Controller* call). No C++
 * exception crosses these calls. */
typedef struct AdaPrec_ControllerObject *AdaPrec_Controller;

#define ADAPREC_RULE_GAIN 0 /* largest predicted accuracy gain per second (the original AdaPrec) */
#define ADAPREC_RULE_RISK 1 /* largest probability of beating fp32's gain per second */

typedef struct AdaPrec_ControllerOptions {
  uint64_t continuationSteps; /* at least this many steps after each decision (default 300) */
  double maxOverhead;         /* (0, 1]: continuations are lengthened until the abandoned branches are
                                 at most this share of a phase's time (default 0.1; 1: fixed); below 1
                                 a decision that confirms the previous one's choice (keeps it, or
                                 switches to a candidate not clearly better) doubles its continuation,
                                 up to 8x for 3 confirmations in a row (docs/trainer.md, "Back-off") */
  uint64_t totalSteps;        /* the step training ends at, in optimizer steps (predictions stop there;
                                 a phase whose branches reach past it predicts one step beyond them; a
                                 phase cannot begin at or past it); 0: unknown */
  uint64_t validationImages;  /* images behind each accuracy (binomial noise in the fit); 0: unknown */
  double stepsPerEpoch;       /* for the record's "epoch" field only; 0: the record's epoch is 0 */
  int rule;                   /* ADAPREC_RULE_GAIN (default) or ADAPREC_RULE_RISK */
  int prune;                  /* 1 (default): AdaPrec_ControllerShouldSpeculate prunes; 0: always yes */
  double minSpeedup;          /* [0, 1): a candidate's step must be shown this much faster than the
                                 baseline's (fp32) and than any more precise candidate's not pruned
                                 to be speculated (default 0.10; docs/trainer.md, "Pruning") */
} AdaPrec_ControllerOptions;

typedef struct AdaPrec_Decision {
  char format[64];            /* the candidate to continue with (NUL-terminated) */
  uint64_t candidate;         /* its index in the candidate list */
  double predictedMean;       /* its predicted validation accuracy at predictedStep */
  double predictedSd;
  uint64_t predictedStep;     /* absolute step of that prediction */
  uint64_t continuationSteps; /* continue this many steps after the chosen branch's end, then the next
                                 phase (at most 2^53, however small maxOverhead or the step times) */
} AdaPrec_Decision;

const char *AdaPrec_ControllerLastError(void);
void AdaPrec_ControllerDefaultOptions(AdaPrec_ControllerOptions *options);
/* The library's default of a setting the trainer around the controller applies itself (adaprec-train's
 * options and the Python driver read these; neither restates them): "speculative_steps" (steps per
 * branch, --spec-steps), "eval_points" (evaluations per branch, --spec-evals), "probe_steps" and
 * "contested_probe_steps" (--probe-steps, --contested-probe-steps), "first_phase_step" (--spec-start),
 * "validation_images" (--val-images), and the options above: "continuation_steps", "max_overhead",
 * "min_speedup", "max_continuation_doublings" (--max-doublings). ADAPREC_ERR_INVALID_ARGUMENT naming
 * the valid names for any other name or a NULL pointer. */
int AdaPrec_ControllerDefault(const char *name, double *value);
/* The default candidates (adaprec-train's --candidates), comma-separated: written into out when
 * capacity suffices (with its NUL), *size always set to its length without the NUL (out NULL to ask). */
int AdaPrec_ControllerDefaultCandidates(char *out, size_t capacity, size_t *size);
/* candidates: count format specs ("fp32", "fp8s", "table4+ef", "fastest"), each at most once; options
 * NULL: the defaults. */
int AdaPrec_ControllerCreate(const char *const *candidates, size_t count,
                             const AdaPrec_ControllerOptions *options, AdaPrec_Controller *out);
/* NULL is accepted. A freed handle is refused by every call (ADAPREC_ERR_INVALID_ARGUMENT) until a
 * later AdaPrec_ControllerCreate is given the same address. */
int AdaPrec_ControllerFree(AdaPrec_Controller controller);
/* Starts a phase whose branches all start at absolute step `step` (forgets the last phase's points).
 * ADAPREC_ERR_INVALID_ARGUMENT, and the controller unchanged, when `step` is at or past a known
 * totalSteps (no step left to choose for: usually totalSteps given in epochs). */
int AdaPrec_ControllerBeginPhase(AdaPrec_Controller controller, uint64_t step);
/* One point of a candidate's branch: absolute step (the first point of every branch at the phase's
 * step, with the accuracy of the shared start; then increasing), validation accuracy in [0, 1], and
 * the branch's seconds per training step measured so far (the value given with the branch's last
 * point counts; 0 is allowed at the start point). Every branch's start point must carry the same
 * accuracy (the phase's one state, evaluated once): a start that differs from another candidate's is
 * refused, since each candidate's gain is measured from its own start. */
int AdaPrec_ControllerReportPoint(AdaPrec_Controller controller, const char *candidate, uint64_t step,
                                  double accuracy, double secondsPerStep);
/* Optional: the trainer's learning rate at phase-relative steps 0 .. count-1 of this phase (up to the
 * longest prediction: the phase's start to the end of training; the last rate holds beyond them).
 * When they are not all equal, the decision's predictor fits the schedule-aware learning-curve model
 * with them as its schedule (docs/predictor.md; the record's "lr_schedule" says "points:N"); without
 * them or with a constant rate, the model without a schedule ("none"). Rates must be finite and >= 0,
 * the largest of varying rates at least 2.2e-308 (a normal double; only ratios matter), else
 * ADAPREC_ERR_INVALID_ARGUMENT and the rates set before are kept. */
int AdaPrec_ControllerSetLearningRates(AdaPrec_Controller controller, const double *rates, size_t count);
/* The learning-rate schedule `spec` (the forms of adaprec-predict/adaprec-train --lr-schedule:
 * constant, cosine:TOTAL, cosine:TOTAL:WARMUP, poly:TOTAL:POWER, step:GAMMA:S1,S2,..., file:PATH)
 * relative to its peak, lr(step) / peak, at steps first .. first+count-1, written to rates (count
 * doubles; NULL only with count 0, which only checks the spec). ADAPREC_ERR_INVALID_ARGUMENT with a
 * one-line message for a malformed spec. Needs no controller. */
int AdaPrec_ControllerScheduleRates(const char *spec, uint64_t first, size_t count, double *rates);
/* The first step from which the schedule `spec`'s rate is 0 for good, written to *step: TOTAL for
 * cosine:TOTAL[:WARMUP] and poly:TOTAL:POWER, the first step of a file: schedule's final run of zero
 * rates, +infinity (HUGE_VAL) where the rate never reaches 0 (constant, step:, a file ending above 0).
 * A trainer whose training runs past it (TOTAL counted in epochs, the steps in steps) tells the
 * predictor that every branch from there learns nothing: adaprec-train and the Python driver warn.
 * ADAPREC_ERR_INVALID_ARGUMENT with a one-line message for a malformed spec or a NULL pointer. */
int AdaPrec_ControllerScheduleZeroFrom(const char *spec, double *step);
/* Pruning (docs/trainer.md, "Pruning"): the trainer measures every candidate's seconds per step (a
 * few probe steps from the phase's state; the maximum over ranks) and reports them before any branch;
 * then, before running each branch (in AdaPrec_ControllerBranchRank's order), it asks whether the branch is worth
 * running given the step times and the branches reported so far. *speculate 0: the candidate is
 * pruned for this phase (not enough faster than the baseline, or unable to beat a branch already
 * reported even with accuracy 1, or no better than a more precise branch reported would be at its
 * speed, or, for fp32, fp16's branch already reported, which stands in for
 * fp32's, or only fp16 and fp32 left, when fp16 is chosen whatever its branch shows) and needs no
 * points; 1: run its branch and report its points. Needs
 * every candidate's step time first. */
int AdaPrec_ControllerReportStepTime(AdaPrec_Controller controller, const char *candidate, double secondsPerStep);
/* The same from the samples themselves (seconds of each probe step, each the maximum over ranks; the
 * step time is their median): the not_faster verdict then weighs the gap against the samples' spread
 * (pooled over the candidates), so that a noisy machine does not make compression look faster than it
 * is. Interleave the probes (one step of each candidate per round) so that a disturbance lasting a
 * few steps lands on several candidates. One sample each: the plain minSpeedup threshold. */
int AdaPrec_ControllerReportStepSamples(AdaPrec_Controller controller, const char *candidate, const double *seconds,
                                        size_t count);
/* Whether the candidate's probe may stop (*settled 1) before the trainer's probe-step limit: every
 * not_faster test it takes part in is decided by at least twice its margin and a 1.3x step-time ratio
 * beyond the threshold, judged on the samples reported so far (report them after each probe round;
 * a candidate not yet reported is left out). Never while no candidate has two samples. Probe the first
 * round in any order and later rounds fastest first, asking before each step: the fast candidates'
 * second samples give the spread that lets the slow ones stop after one (between nodes their probes
 * were most of the first phase's overhead). Do not report the phase's first probe step (a run's first
 * step carries one-off costs: 1.6x the next ones on shared memory). Needs the candidate's own first
 * sample. */
int AdaPrec_ControllerProbeSettled(AdaPrec_Controller controller, const char *candidate, int *settled);
/* Whether the candidate may probe beyond the trainer's probe-step limit (*contested 1), up to its
 * contested limit (adaprec-train: 6 steps, at most the branch's first evaluation): it and another
 * candidate are both shown faster than fp32 (the baseline), and a not_faster test between the two is
 * not settled, so which of two candidates that can both pay is speculated rests on a few samples
 * (at 100 Mbit/s table2, the best fixed format, was pruned as not faster than table4 in 3 of 7 runs
 * after 2-3 samples each). Where nothing is shown faster than fp32 (one node) nothing probes longer.
 * Needs the candidate's own first sample. */
int AdaPrec_ControllerProbeContested(AdaPrec_Controller controller, const char *candidate, int *contested);
int AdaPrec_ControllerShouldSpeculate(AdaPrec_Controller controller, const char *candidate, int *speculate);
/* The candidate's place (0: first) in the order to ask AdaPrec_ControllerShouldSpeculate and run the
 * branches in, from the step times reported: the fastest candidate that is not pruned first (its
 * branch can dominate the slow ones), then the others most bits per value first, fp16 before fp32
 * (a more precise branch run early bounds the lossier ones; fp16's stands in for fp32's). Needs every
 * candidate's step time. */
int AdaPrec_ControllerBranchRank(AdaPrec_Controller controller, const char *candidate, size_t *rank);
/* Why AdaPrec_ControllerShouldSpeculate said no to the candidate in this phase: "not_faster",
 * "dominated", "bounded" (a more precise candidate's branch already reported, predicted at this
 * candidate's speed, scores no higher than the best branch reported), or "stood_in" (fp32, whose
 * branch fp16's stands in for: said as soon as only those two
 * are left, before fp16's branch, since nothing could then dominate fp16 — a phase that needs no
 * branch at all), or "" (not asked, or speculated). Written into out as DecisionRecord's text. */
int AdaPrec_ControllerPruningReason(AdaPrec_Controller controller, const char *candidate, char *out, size_t capacity,
                                    size_t *size);
/* Decides the phase (every candidate not pruned needs >= 2 points) and closes it: the next points need
 * the next AdaPrec_ControllerBeginPhase. */
int AdaPrec_ControllerDecide(AdaPrec_Controller controller, AdaPrec_Decision *decision);
/* The last decision's record as one line of JSON: written into out when capacity suffices (with its
 * NUL), *size always set to its length without the NUL (out NULL to ask). */
int AdaPrec_ControllerDecisionRecord(AdaPrec_Controller controller, char *out, size_t capacity,
                                     size_t *size);

#ifdef __cplusplus
}
#endif

#endif /* ADAPREC_ADAPREC_MPI_H */
