// The adaprec-train command line as a library: the option set (shared by the tool and the tests) and
// the function that builds data, model, reducer and trainer from it and runs.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "controller/phase_plan.hpp"
#include "trainer.hpp"

namespace CLI {
class App;
}

namespace adaprec::trainer {

struct RunOptions {
  TrainerConfig trainer;
  std::string data = kDefaultFashionMnistDir;
  std::size_t synthetic = 0;      // > 0: a synthetic set of this many training images instead of --data
  std::size_t trainLimit = 0;     // use the first N training images (0: all)
  std::size_t testLimit = 0;
  std::string format = "fp32";    // spec, or per layer: "fc1=table4,fp16" (unnamed = the rest)
  std::string candidates = defaultCandidates();
  // Not "auto": the engine's auto rule sends fp32 where compressing does not pay and in its trial
  // calls (docs/algorithms.md), which would silently erase the precision under study. twoshot is what auto picks for p <= 8 across nodes.
  std::string algo = "twoshot";
  std::string reducer = "auto";   // auto | mpi | adaprec
  std::string bucketing = "fused";
  // --format adaptive (the precision controller, lib/controller). The defaults are ControllerConfig's,
  // declared once there (lib/controller/phase_plan.hpp, where each is explained).
  std::uint64_t specSteps = controllerDefaults().speculativeSteps;  // steps per speculative branch
  int specEvals = controllerDefaults().evalPoints;                  // validation evaluations per branch
  std::uint64_t specStart = controllerDefaults().firstPhaseStep;    // steps in fp32 before the first phase
  std::uint64_t phaseSteps = controllerDefaults().continuationSteps;  // continuation after each decision
  double maxOverhead = controllerDefaults().maxOverhead;  // bound on abandoned speculation per phase
  unsigned maxDoublings = controllerDefaults().maxContinuationDoublings;  // the back-off's
  std::size_t validationImages = controllerDefaults().validationImages;
  // Training images held out as the validation set (adaptive only); 0: exactly --val-images, the images
  // evaluated (more would be taken from training and never used).
  std::size_t holdout = 0;
  // The validation set from the training images right after --train-limit (not the last ones within
  // it): an adaptive run then trains on exactly the images a fixed-format run with that limit does.
  bool holdoutAfterLimit = false;
  std::string rule = controllerDefaults().rule == controller::DecisionRule::kGainPerSecond ? "gain" : "risk";
  bool prune = controllerDefaults().prune;              // pruning by step time (lib/controller/pruning.hpp)
  double minSpeedup = controllerDefaults().minSpeedup;  // a candidate's step must be this much faster than fp32's
  std::uint64_t probeSteps = controllerDefaults().probeSteps;  // steps that measure a candidate's step time
  std::uint64_t contestedProbeSteps = controllerDefaults().contestedProbeSteps;  // while contested (pruning.hpp)

  static const controller::ControllerConfig& controllerDefaults() {
    static const controller::ControllerConfig defaults;
    return defaults;
  }
  // "--candidates"'s default: ControllerConfig's candidates, comma-separated.
  static std::string defaultCandidates() { return controllerDefaults().candidateList(); }
};

// Whether this build has the precision controller (needs the predictor and the communicator).
#ifdef ADAPREC_TRAINER_CONTROLLER
inline constexpr bool kHaveController = true;
#else
inline constexpr bool kHaveController = false;
#endif

void addRunOptions(CLI::App& app, RunOptions& options);

// Collective over comm, after every rank parsed its command line into `app`: the ranks must train the
// same run, so every option must read the same on every rank except those that may name per-node
// places (kPerRankOptions; a file: schedule is compared by its file's bytes, not its path). Options
// that differ (a different --max-steps or --batch in an MPMD launch, a wrapper script adding an option
// on some nodes) hung the job in the first collective they shaped; now AgreedError(kMismatch) on every
// rank, naming each differing option and this rank's value.
inline constexpr const char* kPerRankOptions[] = {"--data", "--log", "--checkpoint", "--no-progress"};
void agreeOnCommandLine(const CLI::App& app, MPI_Comm comm);

struct RunResult {
  Evaluation final;
  double wallSeconds = 0;
  std::uint64_t steps = 0;
  std::uint64_t stateHash = 0;  // rank's parameters + momentum at the end
  std::vector<float> parameters;
  double controllerOverheadSeconds = 0;  // --format adaptive
  std::vector<std::string> layerFormats;  // wire format each layer used in the last step
};

// Collective over comm. Prints the setup and the final accuracy on rank 0 (unless progress is off).
RunResult runTraining(const RunOptions& options, MPI_Comm comm);

// Per-layer format requests from "--format": "fp8" for every layer, or "fc1=table4,conv1=fp32,fp16".
// A layer named twice, two unnamed formats, an unknown format or 'adaptive' are refused.
std::vector<FormatSpec> parseLayerFormats(const std::string& text, const std::vector<LayerRange>& layers);

// "--candidates": comma-separated formats, '+ef' variants and 'fastest', each once (not 'adaptive').
void checkCandidates(const std::string& text);

}  // namespace adaprec::trainer
