#include "run_options.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "adaprec/error.hpp"
#ifdef ADAPREC_TRAINER_CONTROLLER
#include "trainer/controller_adapter.hpp"
#include "trainer_collectives.hpp"
#endif

namespace adaprec::trainer {
namespace {

// Numeric checks whose messages say what is valid ("--epochs: must be an integer >= 1, got '0'"),
// unlike CLI::PositiveNumber's "Value 0 not in range 0 to 1.797...e308". The value is parsed as
// double (every option here fits); `integer` also requires a whole number.
CLI::Validator numberCheck(double low, bool lowOpen, double high, bool highOpen, bool integer) {
  std::ostringstream what;
  what << (integer ? "an integer " : "a number ");
  if (high == std::numeric_limits<double>::infinity()) {
    what << (lowOpen ? "> " : ">= ") << low;
  } else {
    what << "in " << (lowOpen ? "(" : "[") << low << ", " << high << (highOpen ? ")" : "]");
  }
  const std::string valid = what.str();
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double value = 0;
        const bool parsed = CLI::detail::lexical_cast(text, value) && std::isfinite(value);
        const bool ok = parsed && (lowOpen ? value > low : value >= low) && (highOpen ? value < high : value <= high) &&
                        (!integer || value == std::floor(value));
        return ok ? std::string() : "must be " + valid + ", got '" + text + "'";
      },
      valid);
}
constexpr double kNoLimit = std::numeric_limits<double>::infinity();

// --lr-schedule: the predictor's parser decides (one source of truth for the forms and their errors).
CLI::Validator lrScheduleCheck() {
  return CLI::Validator(
      [](std::string& spec) -> std::string {
        try {
          predictor::LrSchedule::parse(spec);
          return std::string();
        } catch (const Error& e) {
          return messageForUsers(e);
        }
      },
      "SPEC");
}
CLI::Validator atLeast(double low) { return numberCheck(low, false, kNoLimit, false, true); }
CLI::Validator positiveReal() { return numberCheck(0, true, kNoLimit, false, false); }
CLI::Validator nonNegativeReal() { return numberCheck(0, false, kNoLimit, false, false); }

// What a per-layer --format item and a --candidates item accept (not 'adaptive': that is the whole
// --format alone). Unknown names are reported with exactly this list.
const std::string& fixedChoiceNames() {
  static const std::string names = validFormatNames() + " (each optionally with +ef), fastest";
  return names;
}

// `orAdaptive`: the item is the whole --format, where 'adaptive' (handled before this) is valid too.
FormatSpec parseFixedChoice(const std::string& text, const std::string& where, bool orAdaptive = false) {
  FormatSpec spec;
  try {
    spec = parseFormatSpec(text);
  } catch (const Error&) {
    ADAPREC_FAIL(ErrorCode::kInvalidArgument, where << ": unknown format '" << text << "'; valid: " << fixedChoiceNames()
                                                    << (orAdaptive ? "; per layer as layer=format; or adaptive" : ""));
  }
  ADAPREC_CHECK_ARG(spec.selection != Selection::kAdaptive,
                    where << ": 'adaptive' is only valid as the whole --format (the controller chooses one format "
                             "for all layers); valid here: "
                          << fixedChoiceNames());
  return spec;
}

}  // namespace

void addRunOptions(CLI::App& app, RunOptions& o) {
  TrainerConfig& t = o.trainer;
  app.add_option("--model", t.model, "Model: mlp (784-512-512-10) or cnn (2 conv + pool stages, then a 1568x512 "
                                     "fully-connected layer holding ~97% of the parameters, CaffeNet's shape)")
      ->check(CLI::IsMember({"mlp", "cnn"}))
      ->capture_default_str();
  app.add_option("--epochs", t.epochs, "Epochs to train")->check(atLeast(1))->capture_default_str();
  app.add_option("--batch", t.batch, "Mini-batch size per rank (global batch = ranks x batch)")
      ->check(atLeast(1))
      ->capture_default_str();
  app.add_option("--lr", t.schedule.baseLr, "Learning rate for a global batch of --lr-batch images; the peak "
                                            "rate is scaled linearly to the real global batch (Goyal et al.)")
      ->check(positiveReal())
      ->capture_default_str();
  app.add_option("--lr-batch", t.schedule.referenceBatch,
                 "Reference global batch of --lr (0: the per-rank --batch, i.e. lr x ranks at peak)")
      ->check(atLeast(0))
      ->capture_default_str();
  app.add_option("--momentum", t.momentum, "SGD momentum, in [0, 1)")
      ->check(numberCheck(0, false, 1, true, false))
      ->capture_default_str();
  app.add_option("--weight-decay", t.weightDecay, "L2 weight decay added to the gradient")
      ->check(nonNegativeReal())
      ->capture_default_str();
  app.add_option("--schedule", t.schedule.kind, std::string("Learning-rate decay: ") + kScheduleKinds)
      ->check(CLI::IsMember({"const", "step", "poly", "cosine"}))
      ->capture_default_str();
  app.add_option("--warmup", t.schedule.warmupEpochs,
                 "Gradual warmup: epochs over which the rate ramps linearly from --lr to the scaled peak")
      ->check(nonNegativeReal())
      ->capture_default_str();
  app.add_option("--milestones", t.schedule.milestones, "step schedule: epochs at which the rate is multiplied "
                                                         "by --gamma (increasing, each > 0; '2,4' or '2 4')")
      ->check(positiveReal())
      ->delimiter(',');
  app.add_option("--gamma", t.schedule.gamma, "step schedule: decay factor (> 0)")
      ->check(positiveReal())
      ->capture_default_str();
  app.add_option("--power", t.schedule.power, "poly schedule: exponent (> 0)")->check(positiveReal())->capture_default_str();
  app.add_option("--lr-schedule", t.schedule.lrSchedule,
                 "Learning-rate schedule over global steps instead of --schedule/--warmup/--milestones/--gamma/"
                 "--power: the rate is the scaled peak times lr(step) / the schedule's peak, lr from constant, "
                 "cosine:TOTAL, cosine:TOTAL:WARMUP, poly:TOTAL:POWER, step:GAMMA:S1,S2,... or file:PATH "
                 "(CSV step,lr), the forms of adaprec-predict --lr-schedule")
      ->check(lrScheduleCheck())
      ->excludes("--schedule")
      ->excludes("--warmup")
      ->excludes("--milestones")
      ->excludes("--gamma")
      ->excludes("--power");
  app.add_option("--format", o.format,
                 "Gradient wire format: a format (fp32 bf16 fp16 fp8 fp8s e4m3 table1..table8 table3z..table8z, '+ef' for error "
                 "feedback), 'fastest' (per layer, measured), per layer 'fc1=table4,fp16' (unnamed = the rest), or 'adaptive' "
                 "(the precision controller chooses among --candidates; docs/trainer.md)")
      ->capture_default_str();
  app.add_option("--candidates", o.candidates, "--format adaptive: comma-separated candidate formats (any format, "
                                               "'+ef' variants, 'fastest'; each once)")
      ->capture_default_str();
  app.add_option("--spec-steps", o.specSteps, "--format adaptive: steps of each candidate's speculative branch "
                                              "(>= --spec-evals)")
      ->check(atLeast(1))
      ->capture_default_str();
  app.add_option("--spec-evals", o.specEvals, "--format adaptive: validation evaluations along each branch")
      ->check(atLeast(1))
      ->capture_default_str();
  app.add_option("--spec-start", o.specStart, "--format adaptive: steps trained in fp32 before the first "
                                              "speculative phase (0: the first decision at step 0)")
      ->capture_default_str();
  app.add_option("--phase-steps", o.phaseSteps, "--format adaptive: minimum continuation steps after each decision")
      ->check(atLeast(1))
      ->capture_default_str();
  app.add_option("--max-overhead", o.maxOverhead,
                 "--format adaptive: the continuation after a decision is lengthened until the abandoned speculation "
                 "(other branches, evaluations) is at most this fraction of the phase's wall time, and every "
                 "candidate is predicted over the continuation it would get; 1: exactly --phase-steps")
      ->check(numberCheck(0.01, false, 1, false, false))
      ->capture_default_str();
  app.add_option("--max-doublings", o.maxDoublings,
                 "--format adaptive: a decision that keeps the previous decision's choice doubles its "
                 "continuation, once more for each decision in a row that keeps it, at most this many times "
                 "(0: never; not with --max-overhead 1)")
      ->check(numberCheck(0, false, 20, false, true))
      ->capture_default_str();
  app.add_option("--val-images", o.validationImages, "--format adaptive: validation images per evaluation")
      ->check(atLeast(1))
      ->capture_default_str();
  app.add_option("--holdout", o.holdout,
                 "--format adaptive: training images held out as the validation set, never trained on "
                 "(default: --val-images, the images each evaluation uses; fewer: each evaluation uses them all, "
                 "more: the rest is taken from training and never used)")
      ->check(atLeast(1));
  app.add_flag("--holdout-after-limit", o.holdoutAfterLimit,
               "--format adaptive: hold out the training images right after --train-limit (not the last ones "
               "within it), so that the run trains on exactly the images a fixed format with the same limit "
               "does (the regret benchmark's comparison); needs --train-limit and that many more images");
  app.add_flag("!--no-prune", o.prune, "--format adaptive: speculate every candidate at every phase (default: "
                                       "candidates that cannot pay are not speculated; docs/trainer.md, pruning)");
  app.add_option("--min-speedup", o.minSpeedup, "--format adaptive: a candidate is speculated only if its measured "
                                                "step is shown (90 % test) at least this fraction faster than "
                                                "fp32's and than a more precise candidate's")
      ->check(numberCheck(0, false, 1, true, false))
      ->capture_default_str();
  app.add_option("--probe-steps", o.probeSteps, "--format adaptive: at most this many steps measure each candidate's "
                                                "step time (once per run; fewer once its verdicts are settled; the "
                                                "start of its branch)")
      ->check(atLeast(1))
      ->capture_default_str();
  app.add_option("--contested-probe-steps", o.contestedProbeSteps,
                 "--format adaptive: up to this many probe steps (when more than --probe-steps) for a "
                 "candidate shown faster than fp32 while its test against another such candidate is not "
                 "settled")
      ->check(atLeast(1))
      ->capture_default_str();
  app.add_option("--rule", o.rule, "--format adaptive: 'gain' (largest predicted accuracy gain per second) or "
                                   "'risk' (largest probability of beating fp32's gain per second)")
      ->check(CLI::IsMember({"gain", "risk"}))
      ->capture_default_str();
  app.add_option("--algo", o.algo, "Allreduce algorithm (auto, native, ring, twoshot, rabenseifner, "
                                   "recursive_doubling, hierarchical). Default twoshot, not auto: auto sends fp32 "
                                   "where compressing does not pay, and in its trial calls (docs/algorithms.md), "
                                   "which would erase the format under study; use auto or hierarchical across "
                                   "nodes")
      ->capture_default_str();
  app.add_option("--reducer", o.reducer, "Gradient reduction: adaprec (the Communicator), mpi (plain "
                                         "MPI_Allreduce, fp32 only), auto (adaprec when this build has it)")
      ->check(CLI::IsMember({"auto", "mpi", "adaprec"}))
      ->capture_default_str();
  app.add_option("--bucketing", o.bucketing, "layer: one allreduce per layer; fused: consecutive layers with the "
                                             "same format in one call")
      ->check(CLI::IsMember({"layer", "fused"}))
      ->capture_default_str();
  auto* reduction =
      app.add_option_function<std::string>(
             "--reduction", [&t](const std::string& name) { t.reduction = parseReductionMode(name); },
             "When gradients are reduced: sequential (after the backward pass), overlap (each bucket on a "
             "communication thread as soon as backward has produced it; results bit-identical to sequential), "
             "auto (sequential and overlap alternated for a few steps, then the faster one; results as "
             "sequential's), double-buffering (during the next step, whose update applies them: one step "
             "stale, ChainerMN's double buffering; step 0 updates nothing). All but sequential need "
             "MPI_THREAD_SERIALIZED (auto falls back to sequential without it; docs/trainer.md)")
          ->check(CLI::IsMember({"auto", "sequential", "overlap", "double-buffering"}))
          ->default_str("auto");
  app.add_flag_callback(
         "--double-buffering", [&t] { t.reduction = ReductionMode::kDoubleBuffering; },
         "Same as --reduction double-buffering")
      ->excludes(reduction);
  app.add_option("--log", t.logPath, "JSON-lines log: one record per evaluation (epoch, step, wall seconds, losses, "
                                     "accuracy, format per layer, bytes sent and bytes fp32 would have sent)");
  app.add_option("--checkpoint", t.checkpointDir, "Directory for checkpoints (atomic; one file per rank)");
  app.add_option("--checkpoint-every", t.checkpointEvery, "Steps between checkpoints (0: every epoch end)")
      ->check(atLeast(0))
      ->capture_default_str();
  app.add_flag("--resume", t.resume, "Continue bit-identically from the latest checkpoint in --checkpoint "
                                     "(starts fresh if there is none yet)");
  app.add_option("--seed", t.seed, "Seed of initialization and data order")->check(atLeast(0))->capture_default_str();
  app.add_option("--data", o.data, "Directory with MNIST-format files (train-images-idx3-ubyte[.gz], ...)")
      ->capture_default_str();
  app.add_option("--synthetic", o.synthetic, "Train on a SYNTHETIC data set of N images (28x28, 10 classes) "
                                             "instead of --data; the test set is N/6 more")
      ->check(atLeast(0))
      ->capture_default_str();
  app.add_option("--train-limit", o.trainLimit, "Use only the first N training images (0: all)")
      ->check(atLeast(0))
      ->capture_default_str();
  app.add_option("--test-limit", o.testLimit, "Use only the first N test images (0: all)")
      ->check(atLeast(0))
      ->capture_default_str();
  app.add_option("--eval-every", t.evalEvery, "Steps between evaluations (0: every epoch end)")
      ->check(atLeast(0))
      ->capture_default_str();
  app.add_option("--eval-samples", t.evalSamples, "Test images per intermediate evaluation (0: all; the final "
                                                  "evaluation always uses all)")
      ->check(atLeast(0))
      ->capture_default_str();
  app.add_option("--hash-every", t.hashEvery, "Steps between cross-rank weight-hash checks (0: only at evaluations)")
      ->check(atLeast(0))
      ->capture_default_str();
  app.add_option("--max-steps", t.maxSteps, "Stop after this many steps in total (0: all epochs)")
      ->check(atLeast(0))
      ->capture_default_str();
  app.add_option("--backend", t.backend, "Layer math backend")->check(CLI::IsMember({"eigen"}))->capture_default_str();
  app.add_flag("!--no-progress", t.progress,
               "No progress line, header or per-evaluation lines (the final test accuracy line still prints)");
}

namespace {

// What an option reads as on this rank: the values given, or its default. A file: schedule reads as
// the bytes of its file (each node may keep its own copy at its own path).
std::string optionText(const CLI::Option& option) {
  std::string text;
  if (option.count() == 0) {
    text = "default " + option.get_default_str();
  } else {
    for (const std::string& value : option.results()) text += (text.empty() ? "" : " ") + value;
  }
  if (option.get_name() == "--lr-schedule" && text.rfind("file:", 0) == 0) {
    std::ifstream in(text.substr(5), std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    text = "a file: schedule of " + std::to_string(bytes.str().size()) + " bytes, FNV-1a " +
           std::to_string(detail::fnv1a(bytes.str()));
  }
  return text;
}

}  // namespace

void agreeOnCommandLine(const CLI::App& app, MPI_Comm comm) {
  std::vector<const CLI::Option*> options;
  for (const CLI::Option* option : app.get_options()) {
    const std::string name = option->get_name();
    const bool perRank = std::find(std::begin(kPerRankOptions), std::end(kPerRankOptions), name) !=
                         std::end(kPerRankOptions);
    if (!perRank && name != "--help") options.push_back(option);
  }
  // Slot 0: the number of options (one binary on every rank); then each option's hash. Min and max
  // over the ranks differ exactly where some rank reads the option differently.
  std::vector<std::uint64_t> low(options.size() + 1), high;
  low[0] = options.size();
  std::vector<std::string> texts;
  for (const CLI::Option* option : options) {
    texts.push_back(optionText(*option));
    low[texts.size()] = detail::fnv1a(texts.back());
  }
  high = low;
  int counts[2] = {static_cast<int>(low.size()), -static_cast<int>(low.size())};
  timedAllreduce(MPI_IN_PLACE, counts, 2, MPI_INT, MPI_MAX, comm, "the command lines' agreement");
  ADAPREC_CHECK(counts[0] == -counts[1], ErrorCode::kMismatch,
                "the ranks run adaprec-train builds with different option sets (" << -counts[1] << " to " << counts[0]
                                                                                  << " options)");
  timedAllreduce(MPI_IN_PLACE, low.data(), static_cast<int>(low.size()), MPI_UINT64_T, MPI_MIN, comm,
                 "the command lines' agreement");
  timedAllreduce(MPI_IN_PLACE, high.data(), static_cast<int>(high.size()), MPI_UINT64_T, MPI_MAX, comm,
                 "the command lines' agreement");
  std::string differing;
  for (std::size_t i = 0; i < options.size(); ++i) {
    if (low[i + 1] == high[i + 1]) continue;
    differing += (differing.empty() ? "" : ", ") + options[i]->get_name() + " (this rank: " + texts[i] + ")";
  }
  if (differing.empty()) return;
  std::string perRank;
  for (const char* name : kPerRankOptions) perRank += (perRank.empty() ? "" : ", ") + std::string(name);
  throw AgreedError(ErrorCode::kMismatch,
                    "the ranks were given different options: " + differing +
                        "; every rank must run the same command line (only " + perRank +
                        " and the path of a file: schedule may differ)");
}

std::vector<FormatSpec> parseLayerFormats(const std::string& text, const std::vector<LayerRange>& layers) {
  std::vector<FormatSpec> out(layers.size());
  std::vector<bool> named(layers.size(), false);
  FormatSpec fallback;
  bool haveFallback = false;
  std::stringstream ss(text);
  std::string item;
  // A repeated layer (or two formats for "the rest") is refused: silently keeping the last one would
  // run an experiment other than the one asked for.
  while (std::getline(ss, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) {
      ADAPREC_CHECK_ARG(!haveFallback, "--format '" << text << "' gives the unnamed layers two formats ('"
                                                    << toString(fallback) << "' and '" << item
                                                    << "'); give one, and name layers as layer=format");
      fallback = parseFixedChoice(item, "--format", item == text);
      haveFallback = true;
      continue;
    }
    const std::string layer = item.substr(0, eq);
    bool found = false;
    for (std::size_t i = 0; i < layers.size(); ++i) {
      if (layers[i].name == layer) {
        ADAPREC_CHECK_ARG(!named[i], "--format '" << text << "' names layer '" << layer
                                                  << "' more than once; give each layer one format");
        out[i] = parseFixedChoice(item.substr(eq + 1), "--format " + layer);
        named[i] = found = true;
      }
    }
    std::string valid;
    for (const auto& l : layers) valid += (valid.empty() ? "" : ", ") + l.name;
    ADAPREC_CHECK_ARG(found, "--format names layer '" << layer << "'; the model's layers are " << valid);
  }
  for (std::size_t i = 0; i < layers.size(); ++i) {
    if (!named[i]) out[i] = fallback;
  }
  return out;
}

void checkCandidates(const std::string& text) {
  std::set<std::string> seen;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    ADAPREC_CHECK_ARG(!item.empty(), "--candidates '" << text << "' has an empty entry");
    parseFixedChoice(item, "--candidates");
    ADAPREC_CHECK_ARG(seen.insert(item).second, "--candidates '" << text << "' names '" << item << "' more than once");
  }
  ADAPREC_CHECK_ARG(!seen.empty(), "--candidates is empty; valid entries: " << fixedChoiceNames());
}

RunResult runTraining(const RunOptions& o, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  Dataset train, test;
  if (o.synthetic > 0) {
    train = makeSyntheticDataset(o.synthetic, 28, 28, 10, o.trainer.seed);
    // Same prototypes (same seed), fresh noise: draw more and keep the tail as the test set.
    Dataset both = makeSyntheticDataset(o.synthetic + o.synthetic / 6, 28, 28, 10, o.trainer.seed);
    test = both;
    test.pixels.erase(test.pixels.begin(), test.pixels.begin() + static_cast<std::ptrdiff_t>(o.synthetic * 784));
    test.labels.erase(test.labels.begin(), test.labels.begin() + static_cast<std::ptrdiff_t>(o.synthetic));
    test.description = "SYNTHETIC test set (" + std::to_string(test.count()) + " images)";
  } else {
    train = loadIdxDataset(o.data, Split::kTrain);
    test = loadIdxDataset(o.data, Split::kTest);
  }
  const bool adaptive = o.format == "adaptive";
  const std::size_t holdout = o.holdout > 0 ? o.holdout : o.validationImages;
  Dataset validation;
  if (adaptive && o.holdoutAfterLimit) {
    ADAPREC_CHECK_ARG(o.trainLimit > 0 && o.trainLimit + holdout <= train.count(),
                      "--holdout-after-limit takes " << holdout << " validation images after --train-limit "
                          << o.trainLimit << " but the training split has " << train.count()
                          << (o.trainLimit == 0 ? " (and no --train-limit was given)" : ""));
    // Images limit .. limit + holdout - 1: never trained on by any run with this limit.
    validation = train;
    validation.pixels.erase(validation.pixels.begin(),
                            validation.pixels.begin() + static_cast<std::ptrdiff_t>(o.trainLimit * train.pixelsPerImage()));
    validation.labels.erase(validation.labels.begin(), validation.labels.begin() + static_cast<std::ptrdiff_t>(o.trainLimit));
    validation.truncate(holdout);
    validation.description = "validation (training images " + std::to_string(o.trainLimit) + "-" +
                             std::to_string(o.trainLimit + holdout - 1) + " of " + train.description + ")";
  }
  train.truncate(o.trainLimit);
  test.truncate(o.testLimit);
  if (adaptive) checkCandidates(o.candidates);
  ADAPREC_CHECK(!adaptive || kHaveController, ErrorCode::kUnsupported,
                "--format adaptive: this build has no precision controller (it needs the predictor and the communicator)");
  if (adaptive && !o.holdoutAfterLimit) {
    ADAPREC_CHECK_ARG(holdout < train.count(), "--format adaptive holds out "
                                                   << holdout << " training images as its validation set ("
                                                   << (o.holdout > 0 ? "--holdout" : "--val-images: no --holdout given")
                                                   << ") but there are " << train.count() << "; give fewer");
    // The last `holdout` training images: fixed, never trained on, identical on every rank.
    const std::size_t keep = train.count() - holdout;
    validation = train;
    validation.pixels.erase(validation.pixels.begin(),
                            validation.pixels.begin() + static_cast<std::ptrdiff_t>(keep * train.pixelsPerImage()));
    validation.labels.erase(validation.labels.begin(), validation.labels.begin() + static_cast<std::ptrdiff_t>(keep));
    validation.description = "validation (held out from " + train.description + ")";
    train.truncate(keep);
  }

  // The layer list is needed to parse per-layer formats before the trainer exists.
  const std::vector<LayerRange> layers = makeModel(o.trainer.model, Shape{1, train.rows, train.cols}, train.classes)
                                             ->layerRanges();
  // Adaptive runs start in fp32; the controller switches formats from its first decision (--spec-start).
  const std::vector<FormatSpec> formats = parseLayerFormats(adaptive ? "fp32" : o.format, layers);
  bool allFp32 = true;
  for (const FormatSpec& f : formats) allFp32 &= f == FormatSpec{};
  const bool useMpi = o.reducer == "mpi" || (o.reducer == "auto" && !kHaveCommunicatorReducer);
  ADAPREC_CHECK_ARG(!useMpi || (allFp32 && !adaptive), "--reducer mpi sends fp32 only; --format "
                                                           << o.format << " needs the AdaPrec communicator");
  ADAPREC_CHECK(useMpi || kHaveCommunicatorReducer, ErrorCode::kUnsupported,
                "--reducer adaprec: this build of adaprec-train has no AdaPrec communicator");
  std::unique_ptr<GradientReducer> reducer;
  if (useMpi) {
    reducer = makeMpiReducer(comm, layers.size());
  } else {
#ifdef ADAPREC_TRAINER_COMMUNICATOR
    reducer = makeCommunicatorReducer(comm, formats, parseAlgorithm(o.algo),
                                      o.bucketing == "layer" ? Bucketing::kPerLayer : Bucketing::kFused);
#endif
  }

  TrainerConfig config = o.trainer;
  config.formatLabel = o.format;
  Trainer trainer(config, comm, std::move(train), std::move(test), std::move(reducer));
  if (rank == 0 && config.progress) {
    std::fprintf(stderr, "adaprec-train: %s, %d rank(s) x batch %d, %llu steps/epoch, reducer %s, format %s\n%s\n",
                 config.model.c_str(), size, config.batch,
                 static_cast<unsigned long long>(trainer.stepsPerEpoch()), trainer.reducer().name().c_str(),
                 o.format.c_str(), trainer.model().summary().c_str());
  }
  // A schedule whose rate reaches 0 before the last step (TOTAL counted in epochs, steps in steps)
  // trains the rest at rate 0, where an update changes nothing, and the controller forecasts every
  // branch flat from there: said once, as the run is still what was asked for.
  if (const auto& schedule = trainer.config().schedule.parsed;
      rank == 0 && schedule && schedule->zeroFrom() < static_cast<double>(trainer.totalSteps())) {
    std::fprintf(stderr,
                 "adaprec-train: warning: --lr-schedule %s reaches a rate of 0 at step %.10g, before the end of "
                 "training at step %llu: the steps from there change nothing; --lr-schedule counts steps "
                 "(global steps, %llu an epoch here), not epochs\n",
                 schedule->spec().c_str(), schedule->zeroFrom(), static_cast<unsigned long long>(trainer.totalSteps()),
                 static_cast<unsigned long long>(trainer.stepsPerEpoch()));
  }
  RunResult r;
#ifdef ADAPREC_TRAINER_CONTROLLER
  if (adaptive) {
    trainer.setValidationSet(std::move(validation));
    controller::ControllerConfig cc;
    cc.candidates.clear();
    std::stringstream ss(o.candidates);
    for (std::string item; std::getline(ss, item, ',');) cc.candidates.push_back(item);
    cc.speculativeSteps = o.specSteps;
    cc.evalPoints = o.specEvals;
    cc.continuationSteps = o.phaseSteps;
    cc.firstPhaseStep = o.specStart;
    cc.maxOverhead = o.maxOverhead;
    cc.maxContinuationDoublings = o.maxDoublings;
    cc.validationImages = o.validationImages;
    cc.rule = controller::parseDecisionRule(o.rule);
    cc.prune = o.prune;
    cc.minSpeedup = o.minSpeedup;
    cc.probeSteps = o.probeSteps;
    cc.contestedProbeSteps = o.contestedProbeSteps;
    // Options that leave no room for the first phase make an fp32 run that only the log's
    // "decisions":0 would tell apart.
    if (rank == 0 && !cc.phaseFits(cc.firstPhaseStep, trainer.totalSteps())) {
      std::fprintf(stderr,
                   "adaprec-train: warning: --format adaptive makes no decision in this run: its first phase "
                   "(--spec-start %llu + --spec-steps %llu) does not fit before the end of training at step %llu; "
                   "it trains in fp32 throughout\n",
                   static_cast<unsigned long long>(o.specStart), static_cast<unsigned long long>(o.specSteps),
                   static_cast<unsigned long long>(trainer.totalSteps()));
    }
    ControllerHook controller(cc);
    r.final = trainer.train(&controller);
    r.controllerOverheadSeconds = controller.overheadSeconds();
  } else {
    r.final = trainer.train();
  }
#else
  r.final = trainer.train();
#endif
  r.wallSeconds = trainer.wallSeconds();
  r.steps = trainer.stepsDone();
  r.stateHash = trainer.stateHash();
  r.parameters.assign(trainer.model().parameters().begin(), trainer.model().parameters().end());
  r.layerFormats = trainer.reducer().layerFormats();
  // The run's result: printed with --no-progress too (a quiet batch job without --log lost it).
  if (rank == 0) {
    std::fprintf(stderr, "final test accuracy %.4f (loss %.4f, %llu images) after %llu steps, %.1f s\n",
                 r.final.accuracy, r.final.loss, static_cast<unsigned long long>(r.final.images),
                 static_cast<unsigned long long>(r.steps), r.wallSeconds);
  }
  return r;
}

}  // namespace adaprec::trainer
