// The precision controller's C API (AdaPrec_Controller*, include/adaprec/adaprec_mpi.h), built into
// libadaprec_controller. A trainer reports each phase's branch points; planPhase (the decision
// adaprec-train makes) answers. Every entry point catches everything into a code and a one-line
// message, so no C++ exception reaches the caller.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "adaprec/adaprec_mpi.h"
#include "adaprec/error.hpp"
#include "adaprec/predictor.hpp"
#include "capi/capi_guard.hpp"
#include "controller/decision.hpp"
#include "controller/phase_plan.hpp"
#include "controller/pruning.hpp"

namespace {

using adaprec::Error;
using adaprec::ErrorCode;
namespace ctl = adaprec::controller;

constexpr std::uint64_t kMagic = 0x4144505243544c52ull;  // "ADPRCTLR": tells a live handle from garbage

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

struct AdaPrec_ControllerObject {
  std::uint64_t magic = kMagic;
  ctl::ControllerConfig config;
  double stepsPerEpoch = 0;
  std::uint64_t totalSteps = 0;
  std::uint64_t validationImages = 0;
  double created = now();
  // The current phase.
  bool open = false;
  std::uint64_t start = 0;
  std::vector<ctl::CandidateObservation> observations;
  std::vector<std::string> pruned;  // per candidate: "" or why AdaPrec_ControllerShouldSpeculate said no
  std::vector<std::string> asked;   // candidates in the order ShouldSpeculate was first asked about them
  std::vector<std::string> boundedBy;  // per candidate pruned as "bounded": the branch that bounded it
  // AdaPrec_ControllerReportStepTime's (one sample) or ReportStepSamples' (not_faster's inputs).
  std::vector<std::vector<double>> stepSamples;
  std::vector<double> learningRates;
  // Decisions so far and the last one's record.
  std::size_t decisions = 0;
  std::string record;
  // The back-off (ControllerConfig::maxContinuationDoublings): the last choice, confirmations in a row.
  std::size_t lastChoice = ctl::kNoBaseline;
  unsigned repeats = 0;
};

namespace {

thread_local std::string lastError;

// This API's entry points: an exception becomes its code and this API's message (capi_guard.hpp).
template <typename Body>
int guarded(const char* function, Body&& body) {
  return adaprec::detail::guardedCall(lastError, function, std::forward<Body>(body));
}

// Every live handle: a freed one is refused without reading its memory (a new controller may have been
// given the same address: the magic number alone let a freed handle drive it).
std::mutex& liveMutex() {
  static std::mutex m;
  return m;
}
std::set<const AdaPrec_ControllerObject*>& liveHandles() {
  static std::set<const AdaPrec_ControllerObject*> live;
  return live;
}

AdaPrec_ControllerObject& objectOf(AdaPrec_Controller controller) {
  ADAPREC_CHECK_ARG(controller != nullptr, "null AdaPrec_Controller");
  {
    std::lock_guard lock(liveMutex());
    ADAPREC_CHECK_ARG(liveHandles().count(controller) != 0, "not a live AdaPrec_Controller (freed or never created)");
  }
  ADAPREC_CHECK_ARG(controller->magic == kMagic, "not a live AdaPrec_Controller (freed or never created)");
  return *controller;
}

// Steps travel as doubles (the predictor's x): beyond 2^53 they are no longer exact.
constexpr std::uint64_t kMaxStep = std::uint64_t{1} << 53;

// The one check of that bound: steps first .. first + count - 1 (what names them in the message).
void checkStepsExact(const std::string& what, std::uint64_t first, std::uint64_t count = 1) {
  ADAPREC_CHECK_ARG(first < kMaxStep && count <= kMaxStep - first,
                    what << " reach" << (count == 1 ? "es" : "") << " beyond 2^53 (steps must stay exact as doubles)");
}

std::size_t candidateIndex(const AdaPrec_ControllerObject& c, const char* name) {
  ADAPREC_CHECK_ARG(name != nullptr, "candidate must not be NULL");
  std::string known;
  for (std::size_t i = 0; i < c.config.candidates.size(); ++i) {
    if (c.config.candidates[i] == name) return i;
    known += (i ? ", " : "") + c.config.candidates[i];
  }
  ADAPREC_FAIL(ErrorCode::kInvalidArgument, "unknown candidate '" << name << "' (candidates: " << known << ")");
}

// The open phase as planPhase sees it; config.speculativeSteps is set to the longest branch. complete:
// every candidate not pruned must have its branch (Decide); otherwise candidates without points are
// pending (ShouldSpeculate).
ctl::PhaseMeasurements measurements(const AdaPrec_ControllerObject& c, ctl::ControllerConfig& config, bool complete) {
  ctl::PhaseMeasurements phase;
  phase.start = c.start;
  phase.previousChoice = c.lastChoice;
  phase.previousRepeats = c.repeats;
  phase.validationImages = c.validationImages;
  phase.learningRates = c.learningRates;
  phase.pruned = c.pruned;
  phase.boundedBy = c.boundedBy;
  phase.speculationOrder = c.asked;
  if (!c.asked.empty()) {
    // What the not_faster verdicts used: the reported samples' medians (a branch's points report its own
    // step time later, into its observation).
    for (std::size_t i = 0; i < c.observations.size(); ++i) {
      phase.pruningStepSeconds.push_back(c.stepSamples[i].empty() ? c.observations[i].secondsPerStep
                                                                  : ctl::median(c.stepSamples[i]));
    }
    phase.pruningStepSamples = c.stepSamples;
  }
  std::uint64_t longest = 1;
  for (std::size_t i = 0; i < c.observations.size(); ++i) {
    const ctl::CandidateObservation& o = c.observations[i];
    phase.branchSeconds.push_back(0);
    if (!c.pruned[i].empty() || (!complete && o.steps.size() < 2)) continue;
    ADAPREC_CHECK_ARG(o.steps.size() >= 2, "candidate " << o.name << " has " << o.steps.size()
                                                        << " point(s) in this phase; it needs its start and >= 1 more");
    ADAPREC_CHECK_ARG(o.secondsPerStep > 0, "candidate " << o.name << ": no seconds per step (> 0) was reported");
    longest = std::max(longest, static_cast<std::uint64_t>(o.steps.back()));
    // The trainer timed its steps, not its evaluations: the branch's seconds are its steps'.
    phase.branchSeconds.back() = o.steps.back() * o.secondsPerStep;
    phase.speculationSeconds += phase.branchSeconds.back();
  }
  phase.observations = c.observations;
  // totalSteps 0: the end is unknown. A phase whose branches reach past a known end predicts one step
  // beyond its branches, never as if the end were unknown (a phase cannot begin at or past the end).
  phase.remainingSteps = c.totalSteps == 0 ? std::numeric_limits<std::uint32_t>::max()
                                           : (c.totalSteps > c.start ? c.totalSteps - c.start : 0);
  // Branches that reach the end of training still get a decision (predicted one step beyond), as in
  // adaprec-train, whose last phase may end exactly there.
  config.speculativeSteps = longest;
  return phase;
}

void beginPhase(AdaPrec_ControllerObject& c, std::uint64_t step) {
  c.open = true;
  c.start = step;
  c.observations.assign(c.config.candidates.size(), {});
  c.pruned.assign(c.config.candidates.size(), "");
  c.boundedBy.assign(c.config.candidates.size(), "");
  c.asked.clear();
  c.stepSamples.assign(c.config.candidates.size(), {});
  for (std::size_t i = 0; i < c.observations.size(); ++i) c.observations[i].name = c.config.candidates[i];
  c.learningRates.clear();
}

}  // namespace

extern "C" const char* AdaPrec_ControllerLastError(void) { return lastError.c_str(); }

extern "C" void AdaPrec_ControllerDefaultOptions(AdaPrec_ControllerOptions* options) {
  if (options == nullptr) return;
  const ctl::ControllerConfig defaults;
  *options = AdaPrec_ControllerOptions{};
  options->continuationSteps = defaults.continuationSteps;
  options->maxOverhead = defaults.maxOverhead;
  options->rule = defaults.rule == ctl::DecisionRule::kRiskAware ? ADAPREC_RULE_RISK : ADAPREC_RULE_GAIN;
  options->prune = defaults.prune ? 1 : 0;
  options->minSpeedup = defaults.minSpeedup;
}

namespace {

// The settings a trainer applies around the controller (how long a branch is, how often it is
// evaluated, how its step time is probed), with the options' own: their defaults come from
// ControllerConfig here, so that no driver (the Python one) keeps a copy that drifts.
struct NamedDefault {
  const char* name;
  double (*value)(const ctl::ControllerConfig&);
};
constexpr NamedDefault kNamedDefaults[] = {
    {"speculative_steps", [](const ctl::ControllerConfig& c) { return static_cast<double>(c.speculativeSteps); }},
    {"eval_points", [](const ctl::ControllerConfig& c) { return static_cast<double>(c.evalPoints); }},
    {"probe_steps", [](const ctl::ControllerConfig& c) { return static_cast<double>(c.probeSteps); }},
    {"contested_probe_steps", [](const ctl::ControllerConfig& c) { return static_cast<double>(c.contestedProbeSteps); }},
    {"first_phase_step", [](const ctl::ControllerConfig& c) { return static_cast<double>(c.firstPhaseStep); }},
    {"validation_images", [](const ctl::ControllerConfig& c) { return static_cast<double>(c.validationImages); }},
    {"continuation_steps", [](const ctl::ControllerConfig& c) { return static_cast<double>(c.continuationSteps); }},
    {"max_overhead", [](const ctl::ControllerConfig& c) { return c.maxOverhead; }},
    {"min_speedup", [](const ctl::ControllerConfig& c) { return c.minSpeedup; }},
    {"max_continuation_doublings",
     [](const ctl::ControllerConfig& c) { return static_cast<double>(c.maxContinuationDoublings); }},
};

}  // namespace

extern "C" int AdaPrec_ControllerDefault(const char* name, double* value) {
  return guarded(__func__, [&] {
    ADAPREC_CHECK_ARG(name != nullptr && value != nullptr, "name and value must not be NULL");
    const ctl::ControllerConfig defaults;
    std::string valid;
    for (const NamedDefault& d : kNamedDefaults) {
      if (std::strcmp(d.name, name) == 0) {
        *value = d.value(defaults);
        return;
      }
      valid += std::string(valid.empty() ? "" : ", ") + d.name;
    }
    ADAPREC_FAIL(ErrorCode::kInvalidArgument, "no controller default named '" << name << "' (valid: " << valid << ")");
  });
}

extern "C" int AdaPrec_ControllerDefaultCandidates(char* out, size_t capacity, size_t* size) {
  return guarded(__func__, [&] {
    ADAPREC_CHECK_ARG(size != nullptr, "size must not be NULL");
    const std::string joined = ctl::ControllerConfig{}.candidateList();
    *size = joined.size();
    if (out != nullptr && capacity > joined.size()) std::memcpy(out, joined.c_str(), joined.size() + 1);
  });
}

extern "C" int AdaPrec_ControllerCreate(const char* const* candidates, size_t count,
                                        const AdaPrec_ControllerOptions* options, AdaPrec_Controller* out) {
  return guarded(__func__, [&] {
    ADAPREC_CHECK_ARG(out != nullptr, "out must not be NULL");
    *out = nullptr;
    ADAPREC_CHECK_ARG(candidates != nullptr && count > 0, "the controller needs at least one candidate");
    AdaPrec_ControllerOptions o;
    AdaPrec_ControllerDefaultOptions(&o);
    if (options != nullptr) o = *options;
    ADAPREC_CHECK_ARG(o.rule == ADAPREC_RULE_GAIN || o.rule == ADAPREC_RULE_RISK,
                      "rule " << o.rule << " (valid: ADAPREC_RULE_GAIN, ADAPREC_RULE_RISK)");
    ADAPREC_CHECK_ARG(o.stepsPerEpoch >= 0, "steps per epoch " << o.stepsPerEpoch << " must be >= 0");
    auto object = std::make_unique<AdaPrec_ControllerObject>();
    object->config.candidates.clear();
    for (std::size_t i = 0; i < count; ++i) {
      ADAPREC_CHECK_ARG(candidates[i] != nullptr, "candidate " << i << " is NULL");
      for (const std::string& seen : object->config.candidates) {
        ADAPREC_CHECK_ARG(seen != candidates[i], "candidate '" << seen << "' is named twice");
      }
      object->config.candidates.push_back(candidates[i]);
    }
    object->config.continuationSteps = o.continuationSteps;
    object->config.maxOverhead = o.maxOverhead;
    object->config.rule = o.rule == ADAPREC_RULE_RISK ? ctl::DecisionRule::kRiskAware : ctl::DecisionRule::kGainPerSecond;
    object->config.prune = o.prune != 0;
    object->config.minSpeedup = o.minSpeedup;
    object->config.speculativeSteps = 1;  // set from the points at each decision
    object->config.evalPoints = 1;
    object->config.check();
    object->config.baseline();  // every candidate is a format
    object->stepsPerEpoch = o.stepsPerEpoch;
    object->totalSteps = o.totalSteps;
    object->validationImages = o.validationImages;
    std::lock_guard lock(liveMutex());
    liveHandles().insert(object.get());
    *out = object.release();
  });
}

extern "C" int AdaPrec_ControllerFree(AdaPrec_Controller controller) {
  return guarded(__func__, [&] {
    if (controller == nullptr) return;
    objectOf(controller).magic = 0;
    {
      std::lock_guard lock(liveMutex());
      liveHandles().erase(controller);
    }
    delete controller;
  });
}

extern "C" int AdaPrec_ControllerBeginPhase(AdaPrec_Controller controller, uint64_t step) {
  return guarded(__func__, [&] {
    AdaPrec_ControllerObject& c = objectOf(controller);
    checkStepsExact("step " + std::to_string(step), step);
    // Nothing is left to decide for: such a phase predicted one step past its branches and decided on
    // that, without a word. Its likely cause is total_steps in other units than the steps (epochs).
    ADAPREC_CHECK_ARG(c.totalSteps == 0 || step < c.totalSteps,
                      "a phase at step " << step << " begins at or past the end of training (total steps "
                                         << c.totalSteps << "): no step is left to choose a format for; total "
                                                            "steps counts optimizer steps, not epochs");
    beginPhase(c, step);
  });
}

extern "C" int AdaPrec_ControllerReportPoint(AdaPrec_Controller controller, const char* candidate, uint64_t step,
                                             double accuracy, double secondsPerStep) {
  return guarded(__func__, [&] {
    AdaPrec_ControllerObject& c = objectOf(controller);
    const std::size_t i = candidateIndex(c, candidate);
    ADAPREC_CHECK_ARG(c.open, "no phase is open: call AdaPrec_ControllerBeginPhase first");
    ADAPREC_CHECK_ARG(std::isfinite(accuracy) && accuracy >= 0 && accuracy <= 1,
                      "candidate " << candidate << ": accuracy " << std::setprecision(17) << accuracy
                                   << " is not in [0, 1]");
    ADAPREC_CHECK_ARG(std::isfinite(secondsPerStep) && secondsPerStep >= 0,
                      "candidate " << candidate << ": seconds per step " << std::setprecision(17) << secondsPerStep);
    ctl::CandidateObservation& o = c.observations[i];
    // 0 means "not measured", which only a branch's first point (its start) may say.
    ADAPREC_CHECK_ARG(secondsPerStep > 0 || o.steps.empty(),
                      "candidate " << candidate << ": seconds per step 0 at step " << step
                                   << " (0 is allowed only at the branch's first point)");
    ADAPREC_CHECK_ARG(step >= c.start, "candidate " << candidate << ": step " << step << " is before the phase's start "
                                                    << c.start);
    checkStepsExact("candidate " + std::string(candidate) + ": step " + std::to_string(step), step);
    const double relative = static_cast<double>(step - c.start);
    ADAPREC_CHECK_ARG(o.steps.empty() ? relative == 0 : relative > o.steps.back(),
                      "candidate " << candidate << ": step " << step
                                   << (o.steps.empty() ? " (a branch's first point is at the phase's start, step "
                                                       : " (steps must increase; the last was ")
                                   << (o.steps.empty() ? c.start : c.start + static_cast<std::uint64_t>(o.steps.back()))
                                   << ")");
    // Every branch starts from the phase's one state, and each candidate's gain is measured from its
    // own first point: starts that differ (a branch evaluated after a step, a state not restored, an
    // evaluation on a random subset) would hand the lower start a gain it never made.
    if (o.steps.empty()) {
      for (const ctl::CandidateObservation& other : c.observations) {
        ADAPREC_CHECK_ARG(other.accuracies.empty() || other.accuracies.front() == accuracy,
                          "candidate " << candidate << ": start accuracy " << std::setprecision(17) << accuracy
                                       << " differs from " << other.name << "'s " << other.accuracies.front()
                                       << "; every branch starts from the phase's one state: evaluate it once "
                                          "and report that value as each branch's first point");
      }
    }
    o.steps.push_back(relative);
    o.accuracies.push_back(accuracy);
    if (secondsPerStep > 0) o.secondsPerStep = secondsPerStep;
  });
}

extern "C" int AdaPrec_ControllerSetLearningRates(AdaPrec_Controller controller, const double* rates, size_t count) {
  return guarded(__func__, [&] {
    AdaPrec_ControllerObject& c = objectOf(controller);
    ADAPREC_CHECK_ARG(c.open, "no phase is open: call AdaPrec_ControllerBeginPhase first");
    ADAPREC_CHECK_ARG(rates != nullptr || count == 0, "rates must not be NULL");
    for (std::size_t k = 0; k < count; ++k) {
      ADAPREC_CHECK_ARG(std::isfinite(rates[k]) && rates[k] >= 0, "learning rate " << rates[k] << " at step " << k);
    }
    std::vector<double> given(rates, rates + count);
    ctl::phaseSchedule(given);  // refused here rather than at Decide (a subnormal peak: the same check)
    c.learningRates = std::move(given);
  });
}

extern "C" int AdaPrec_ControllerScheduleRates(const char* spec, uint64_t first, size_t count, double* rates) {
  return guarded(__func__, [&] {
    ADAPREC_CHECK_ARG(spec != nullptr, "spec must not be NULL");
    ADAPREC_CHECK_ARG(rates != nullptr || count == 0, "rates must not be NULL");
    checkStepsExact("steps " + std::to_string(first) + " + " + std::to_string(count), first, count);
    const adaprec::predictor::LrSchedule schedule = adaprec::predictor::LrSchedule::parse(spec);
    const double peak = schedule.peak();
    for (std::size_t k = 0; k < count; ++k) rates[k] = schedule.lrAt(static_cast<double>(first + k)) / peak;
  });
}

extern "C" int AdaPrec_ControllerScheduleZeroFrom(const char* spec, double* step) {
  return guarded(__func__, [&] {
    ADAPREC_CHECK_ARG(spec != nullptr && step != nullptr, "spec and step must not be NULL");
    *step = adaprec::predictor::LrSchedule::parse(spec).zeroFrom();
  });
}

namespace {

void reportStepSamples(AdaPrec_ControllerObject& c, const char* candidate, std::vector<double> samples) {
  const std::size_t i = candidateIndex(c, candidate);
  ADAPREC_CHECK_ARG(c.open, "no phase is open: call AdaPrec_ControllerBeginPhase first");
  ADAPREC_CHECK_ARG(!samples.empty(), "candidate " << candidate << ": no step time");
  for (const double s : samples) {
    ADAPREC_CHECK_ARG(std::isfinite(s) && s > 0, "candidate " << candidate << ": seconds per step " << s << " must be > 0");
  }
  ADAPREC_CHECK_ARG(c.observations[i].steps.empty(), "candidate " << candidate << ": report the step time before its branch");
  c.observations[i].secondsPerStep = ctl::median(samples);
  c.stepSamples[i] = std::move(samples);
}

// The pruning marks so far with the not_faster verdicts ShouldSpeculate will give (every candidate's
// step time reported).
std::vector<std::string> marksWithNotFaster(const AdaPrec_ControllerObject& c) {
  std::vector<std::string> marks = c.pruned;
  const std::vector<bool> notFaster = ctl::notFasterVerdicts(c.config, c.stepSamples);
  for (std::size_t k = 0; k < marks.size(); ++k) {
    if (marks[k].empty() && notFaster[k]) marks[k] = ctl::kPrunedNotFaster;
  }
  return marks;
}

std::vector<double> stepSeconds(const AdaPrec_ControllerObject& c) {
  std::vector<double> seconds;
  for (const ctl::CandidateObservation& o : c.observations) seconds.push_back(o.secondsPerStep);
  return seconds;
}

// Pruning leaves the baseline and one candidate that stands in for it, which nothing can dominate
// (ctl::soleCandidate): the baseline is stood in for before the stand-in's branch is reported, so that a
// trainer asking about every candidate first sees one candidate left and needs no branch at all.
bool standsInWithoutChoice(AdaPrec_ControllerObject& c) {
  const std::size_t sole = ctl::soleCandidate(c.config, marksWithNotFaster(c), stepSeconds(c));
  return sole != ctl::kNoBaseline && sole != c.config.baseline();
}

}  // namespace

extern "C" int AdaPrec_ControllerReportStepTime(AdaPrec_Controller controller, const char* candidate,
                                                double secondsPerStep) {
  return guarded(__func__, [&] { reportStepSamples(objectOf(controller), candidate, {secondsPerStep}); });
}

extern "C" int AdaPrec_ControllerReportStepSamples(AdaPrec_Controller controller, const char* candidate,
                                                   const double* seconds, size_t count) {
  return guarded(__func__, [&] {
    ADAPREC_CHECK_ARG(seconds != nullptr || count == 0, "seconds must not be NULL");
    reportStepSamples(objectOf(controller), candidate, std::vector<double>(seconds, seconds + count));
  });
}

namespace {

// A pruning question about a candidate, asked while a phase is open: the candidate's index, once the
// answer's pointer (named `what` in the error) is checked.
std::size_t phaseQuestion(const AdaPrec_ControllerObject& c, const char* candidate, const int* answer, const char* what) {
  const std::size_t i = candidateIndex(c, candidate);
  ADAPREC_CHECK_ARG(answer != nullptr, what << " must not be NULL");
  ADAPREC_CHECK_ARG(c.open, "no phase is open: call AdaPrec_ControllerBeginPhase first");
  return i;
}

}  // namespace

namespace {

// A probe question (ProbeSettled, ProbeContested): the candidate needs its own first sample.
using ProbeTest = bool (*)(const ctl::ControllerConfig&, const std::vector<std::vector<double>>&, std::size_t);
int probeQuestion(const char* function, AdaPrec_Controller controller, const char* candidate, int* answer,
                  const char* what, ProbeTest test) {
  return guarded(function, [&] {
    AdaPrec_ControllerObject& c = objectOf(controller);
    const std::size_t i = phaseQuestion(c, candidate, answer, what);
    ADAPREC_CHECK_ARG(!c.stepSamples[i].empty(), "candidate " << candidate << " has no step time: report its first "
                                                 "probe step (AdaPrec_ControllerReportStepSamples) first");
    *answer = test(c.config, c.stepSamples, i) ? 1 : 0;
  });
}

}  // namespace

extern "C" int AdaPrec_ControllerProbeSettled(AdaPrec_Controller controller, const char* candidate, int* settled) {
  return probeQuestion(__func__, controller, candidate, settled, "settled", ctl::probeSettled);
}

extern "C" int AdaPrec_ControllerProbeContested(AdaPrec_Controller controller, const char* candidate, int* contested) {
  return probeQuestion(__func__, controller, candidate, contested, "contested", ctl::probeContested);
}

extern "C" int AdaPrec_ControllerShouldSpeculate(AdaPrec_Controller controller, const char* candidate, int* speculate) {
  return guarded(__func__, [&] {
    AdaPrec_ControllerObject& c = objectOf(controller);
    const std::size_t i = phaseQuestion(c, candidate, speculate, "speculate");
    if (!c.config.prune) {  // the header's "0: always yes", step times or not
      ADAPREC_CHECK_ARG(c.observations[i].steps.empty(), "candidate " << candidate << "'s branch was already reported");
      *speculate = 1;
      return;
    }
    for (std::size_t k = 0; k < c.stepSamples.size(); ++k) {
      ADAPREC_CHECK_ARG(!c.stepSamples[k].empty(), "candidate " << c.config.candidates[k] << " has no step time: report "
                                                   "every candidate's (AdaPrec_ControllerReportStepTime) first");
    }
    *speculate = 0;
    if (std::find(c.asked.begin(), c.asked.end(), c.config.candidates[i]) == c.asked.end()) {
      c.asked.push_back(c.config.candidates[i]);
    }
    if (!c.pruned[i].empty()) return;
    ADAPREC_CHECK_ARG(c.observations[i].steps.empty(), "candidate " << candidate << "'s branch was already reported");
    if (c.config.prune && ctl::notFasterVerdicts(c.config, c.stepSamples)[i]) {
      c.pruned[i] = ctl::kPrunedNotFaster;
      return;
    }
    ctl::ControllerConfig config = c.config;
    if (c.config.prune && i == c.config.baseline() &&
        (ctl::standIn(config, measurements(c, config, false)) != ctl::kNoBaseline || standsInWithoutChoice(c))) {
      c.pruned[i] = ctl::kPrunedStoodIn;
      return;
    }
    if (const ctl::BranchVerdict verdict = ctl::beforeBranch(config, measurements(c, config, false), i);
        verdict.pruned != nullptr) {
      c.pruned[i] = verdict.pruned;
      if (verdict.boundedBy != ctl::kNoBaseline) c.boundedBy[i] = c.config.candidates[verdict.boundedBy];
      return;
    }
    *speculate = 1;
  });
}

extern "C" int AdaPrec_ControllerBranchRank(AdaPrec_Controller controller, const char* candidate, size_t* rank) {
  return guarded(__func__, [&] {
    AdaPrec_ControllerObject& c = objectOf(controller);
    ADAPREC_CHECK_ARG(rank != nullptr, "rank must not be NULL");
    ADAPREC_CHECK_ARG(c.open, "no phase is open: call AdaPrec_ControllerBeginPhase first");
    const std::size_t i = candidateIndex(c, candidate);
    for (std::size_t k = 0; k < c.stepSamples.size(); ++k) {
      ADAPREC_CHECK_ARG(!c.stepSamples[k].empty(), "candidate " << c.config.candidates[k] << " has no step time: report "
                                                   "every candidate's (AdaPrec_ControllerReportStepTime) first");
    }
    // The fastest candidate left after the not_faster verdicts goes first.
    const std::vector<std::size_t> order =
        ctl::branchOrder(c.config, stepSeconds(c), c.config.prune ? marksWithNotFaster(c) : c.pruned);
    *rank = static_cast<std::size_t>(std::find(order.begin(), order.end(), i) - order.begin());
  });
}

extern "C" int AdaPrec_ControllerDecide(AdaPrec_Controller controller, AdaPrec_Decision* decision) {
  return guarded(__func__, [&] {
    AdaPrec_ControllerObject& c = objectOf(controller);
    ADAPREC_CHECK_ARG(decision != nullptr, "decision must not be NULL");
    ADAPREC_CHECK_ARG(c.open, "no phase is open: call AdaPrec_ControllerBeginPhase first");
    ctl::ControllerConfig config = c.config;
    const ctl::PhaseMeasurements phase = measurements(c, config, true);
    const ctl::PhasePlan plan = ctl::planPhase(config, phase);
    ctl::PhaseOutcome outcome;
    outcome.choice = plan.decision.choice;
    outcome.continuationSteps = plan.continuationSteps();
    outcome.phase = c.decisions + 1;
    outcome.epoch = c.stepsPerEpoch > 0 ? static_cast<double>(c.start) / c.stepsPerEpoch : 0.0;
    outcome.wallSeconds = now() - c.created;
    outcome.phaseSeconds = phase.speculationSeconds;
    outcome.overheadSeconds = outcome.phaseSeconds - phase.branchSeconds[outcome.choice];
    c.record = ctl::decisionRecord(config, phase, plan, outcome).dump();
    ++c.decisions;
    c.repeats = plan.confirmed ? std::min(c.repeats + 1, c.config.maxContinuationDoublings) : 0;
    c.lastChoice = outcome.choice;
    c.open = false;
    const ctl::CandidateVerdict& v = plan.decision.verdicts[outcome.choice];
    *decision = AdaPrec_Decision{};
    const std::string& name = config.candidates[outcome.choice];
    std::memcpy(decision->format, name.data(), std::min(name.size(), sizeof decision->format - 1));
    decision->candidate = outcome.choice;
    decision->predictedMean = v.predictedMean;
    decision->predictedSd = v.predictedSd;
    decision->predictedStep = c.start + static_cast<std::uint64_t>(v.horizonSteps);
    decision->continuationSteps = outcome.continuationSteps;
  });
}

extern "C" int AdaPrec_ControllerPruningReason(AdaPrec_Controller controller, const char* candidate, char* out,
                                               size_t capacity, size_t* size) {
  return guarded(__func__, [&] {
    const AdaPrec_ControllerObject& c = objectOf(controller);
    ADAPREC_CHECK_ARG(size != nullptr, "size must not be NULL");
    const std::size_t i = candidateIndex(c, candidate);
    // Before the first phase nothing was asked: "" as for a candidate not asked in a phase.
    const std::string reason = i < c.pruned.size() ? c.pruned[i] : std::string();
    *size = reason.size();
    if (out != nullptr && capacity > reason.size()) std::memcpy(out, reason.c_str(), reason.size() + 1);
  });
}

extern "C" int AdaPrec_ControllerDecisionRecord(AdaPrec_Controller controller, char* out, size_t capacity,
                                                size_t* size) {
  return guarded(__func__, [&] {
    const AdaPrec_ControllerObject& c = objectOf(controller);
    ADAPREC_CHECK_ARG(size != nullptr, "size must not be NULL");
    ADAPREC_CHECK_ARG(!c.record.empty(), "no decision yet: call AdaPrec_ControllerDecide first");
    *size = c.record.size();
    if (out != nullptr && capacity > c.record.size()) std::memcpy(out, c.record.c_str(), c.record.size() + 1);
  });
}
