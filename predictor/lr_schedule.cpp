// LrSchedule: the learning-rate schedule the predictor's schedule-aware model reads (predictor.hpp,
// docs/predictor.md). Parsing is strict: every malformed spec is refused with one line naming it.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <iomanip>
#include <limits>
#include <cstdlib>
#include <fstream>
#include <numbers>
#include <sstream>

#include "adaprec/error.hpp"
#include "adaprec/predictor.hpp"

namespace adaprec::predictor {

namespace {
constexpr const char* kForms =
    "constant, cosine:TOTAL, cosine:TOTAL:WARMUP, poly:TOTAL:POWER, step:GAMMA:S1,S2,..., file:PATH";

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> out;
  std::string field;
  std::istringstream in(text);
  while (std::getline(in, field, separator)) out.push_back(field);
  if (!text.empty() && text.back() == separator) out.emplace_back();
  return out;
}

// A whole-field finite number, or nothing.
bool parseNumber(const std::string& text, double& out) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front()))) return false;
  // Decimal only: strtod also reads hexadecimal ("0x100" was 256, "0x1p3" 8).
  if (text.find_first_of("xX") != std::string::npos) return false;
  errno = 0;
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return errno == 0 && end == text.c_str() + text.size() && std::isfinite(out);
}

// What is wrong with the row (step, lr) after the rows at `before` (file and points alike), or "".
std::string rowError(const std::vector<double>& before, double step, double lr) {
  std::ostringstream os;
  if (!std::isfinite(step) || !std::isfinite(lr)) {
    os << "step and lr must be finite, got " << step << "," << lr;
  } else if (step < 0) {
    os << "step must be >= 0, got " << step;
  } else if (!before.empty() && step <= before.back()) {
    os << "steps must increase, got " << before.back() << " then " << step;
  } else if (lr < 0) {
    os << "lr must be >= 0, got " << lr;
  }
  return os.str();
}

std::string trimmed(const std::string& text) {
  const auto begin = text.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t\r") - begin + 1);
}
}  // namespace

// The areas are scaled by the peak's power of two (scaledAreas): a subnormal peak has none that
// scales them back to finite numbers, and the fit failed later with an internal error.
constexpr const char* kSubnormalPeak = "the largest lr must be at least 2.2e-308 (a normal double); only the rates' ratios matter";

#define ADAPREC_SCHEDULE_CHECK(condition, what) \
  ADAPREC_CHECK_ARG(condition, "lr schedule '" << spec << "': " << what)

LrSchedule LrSchedule::parse(const std::string& spec) {
  LrSchedule s;
  s.spec_ = spec;
  const std::size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  if (kind == "file") {
    ADAPREC_SCHEDULE_CHECK(colon != std::string::npos && colon + 1 < spec.size(), "file: needs a PATH");
    const std::string path = spec.substr(colon + 1);
    std::ifstream in(path);
    ADAPREC_SCHEDULE_CHECK(in.good(), "cannot open " << path);
    s.kind_ = Kind::kFile;
    std::string line;
    int number = 0;
    while (std::getline(in, line)) {
      ++number;
      line = trimmed(line);
      if (line.empty() || line.front() == '#') continue;
      const std::vector<std::string> fields = split(line, ',');
      if (s.steps_.empty() && fields.size() == 2 && trimmed(fields[0]) == "step" && trimmed(fields[1]) == "lr") continue;
      double step = 0, lr = 0;
      ADAPREC_SCHEDULE_CHECK(fields.size() == 2 && parseNumber(trimmed(fields[0]), step) &&
                                 parseNumber(trimmed(fields[1]), lr),
                             path << " line " << number << ": expected 'step,lr' (two finite numbers, each 0 or of magnitude 2.2e-308 to 1.8e308), got '" << line
                                  << "'");
      const std::string wrong = rowError(s.steps_, step, lr);
      ADAPREC_SCHEDULE_CHECK(wrong.empty(), path << " line " << number << ": " << wrong);
      s.steps_.push_back(step);
      s.lrs_.push_back(lr);
    }
    ADAPREC_SCHEDULE_CHECK(!s.steps_.empty(), path << " has no 'step,lr' rows");
    ADAPREC_SCHEDULE_CHECK(*std::max_element(s.lrs_.begin(), s.lrs_.end()) > 0, path << ": every lr is 0");
    ADAPREC_SCHEDULE_CHECK(s.peak() >= std::numeric_limits<double>::min(), path << ": " << kSubnormalPeak);
    return s;
  }
  const std::vector<std::string> fields = split(spec, ':');
  if (kind == "constant") {
    ADAPREC_SCHEDULE_CHECK(fields.size() == 1, "constant takes no parameters");
    return s;
  }
  if (kind == "cosine") {
    ADAPREC_SCHEDULE_CHECK(fields.size() == 2 || fields.size() == 3, "expected cosine:TOTAL or cosine:TOTAL:WARMUP");
    ADAPREC_SCHEDULE_CHECK(parseNumber(fields[1], s.total_) && s.total_ > 0, "TOTAL must be a number > 0, got '" << fields[1] << "'");
    if (fields.size() == 3) {
      ADAPREC_SCHEDULE_CHECK(parseNumber(fields[2], s.warmup_) && s.warmup_ >= 0 && s.warmup_ < s.total_,
                             "WARMUP must be a number in [0, TOTAL), got '" << fields[2] << "'");
    }
    s.kind_ = Kind::kCosine;
    return s;
  }
  if (kind == "poly") {
    ADAPREC_SCHEDULE_CHECK(fields.size() == 3, "expected poly:TOTAL:POWER");
    ADAPREC_SCHEDULE_CHECK(parseNumber(fields[1], s.total_) && s.total_ > 0, "TOTAL must be a number > 0, got '" << fields[1] << "'");
    ADAPREC_SCHEDULE_CHECK(parseNumber(fields[2], s.power_) && s.power_ > 0, "POWER must be a number > 0, got '" << fields[2] << "'");
    s.kind_ = Kind::kPoly;
    return s;
  }
  if (kind == "step") {
    ADAPREC_SCHEDULE_CHECK(fields.size() == 3, "expected step:GAMMA:S1,S2,...");
    ADAPREC_SCHEDULE_CHECK(parseNumber(fields[1], s.gamma_) && s.gamma_ > 0 && s.gamma_ <= 1,
                           "GAMMA must be a number in (0, 1], got '" << fields[1] << "'");
    for (const std::string& field : split(fields[2], ',')) {
      double step = 0;
      ADAPREC_SCHEDULE_CHECK(parseNumber(field, step) && step > 0, "steps must be numbers > 0, got '" << field << "'");
      ADAPREC_SCHEDULE_CHECK(s.steps_.empty() || step > s.steps_.back(),
                             "steps must increase, got " << s.steps_.back() << " then " << step);
      s.steps_.push_back(step);
    }
    ADAPREC_SCHEDULE_CHECK(!s.steps_.empty(), "step: needs at least one step");
    s.kind_ = Kind::kStep;
    return s;
  }
  ADAPREC_FAIL(ErrorCode::kInvalidArgument, "lr schedule '" << spec << "': unknown form (valid: " << kForms << ")");
}

LrSchedule LrSchedule::fromPoints(const std::vector<double>& steps, const std::vector<double>& lrs) {
  LrSchedule s;
  s.kind_ = Kind::kFile;
  s.spec_ = "points:" + std::to_string(steps.size());
  const std::string& spec = s.spec_;
  ADAPREC_SCHEDULE_CHECK(steps.size() == lrs.size(), steps.size() << " steps but " << lrs.size() << " rates");
  ADAPREC_SCHEDULE_CHECK(!steps.empty(), "no points");
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const std::string wrong = rowError(s.steps_, steps[i], lrs[i]);
    ADAPREC_SCHEDULE_CHECK(wrong.empty(), "point " << i << ": " << wrong);
    s.steps_.push_back(steps[i]);
    s.lrs_.push_back(lrs[i]);
  }
  ADAPREC_SCHEDULE_CHECK(s.peak() > 0, "every lr is 0");
  ADAPREC_SCHEDULE_CHECK(s.peak() >= std::numeric_limits<double>::min(), kSubnormalPeak);
  return s;
}

double LrSchedule::peak() const {
  return kind_ == Kind::kFile ? *std::max_element(lrs_.begin(), lrs_.end()) : 1.0;
}

double LrSchedule::lrAt(double step) const {
  switch (kind_) {
    case Kind::kConstant:
      return 1.0;
    case Kind::kCosine: {
      if (step < warmup_) return step / warmup_;
      const double progress = std::clamp((step - warmup_) / (total_ - warmup_), 0.0, 1.0);
      return 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
    }
    case Kind::kPoly:
      return std::pow(1.0 - std::clamp(step / total_, 0.0, 1.0), power_);
    case Kind::kStep: {
      double lr = 1.0;
      for (double milestone : steps_) lr *= step >= milestone ? gamma_ : 1.0;
      return lr;
    }
    case Kind::kFile: {
      if (step <= steps_.front()) return lrs_.front();
      if (step >= steps_.back()) return lrs_.back();
      const std::size_t i = static_cast<std::size_t>(std::upper_bound(steps_.begin(), steps_.end(), step) - steps_.begin());
      const double f = (step - steps_[i - 1]) / (steps_[i] - steps_[i - 1]);
      return lrs_[i - 1] + f * (lrs_[i] - lrs_[i - 1]);
    }
  }
  return 1.0;
}

bool LrSchedule::neverAnneals() const {
  if (kind_ == Kind::kConstant) return true;
  if (kind_ == Kind::kStep) return gamma_ == 1.0;  // step:1:... multiplies by 1: constant
  if (kind_ != Kind::kFile) return false;
  for (std::size_t i = 1; i < lrs_.size(); ++i) {
    if (lrs_[i] < lrs_[i - 1]) return false;
  }
  return true;
}

double LrSchedule::zeroFrom() const {
  switch (kind_) {
    case Kind::kCosine:
    case Kind::kPoly:
      return total_;
    case Kind::kFile: {
      std::size_t first = lrs_.size();
      while (first > 0 && lrs_[first - 1] == 0) --first;
      return first < lrs_.size() ? steps_[first] : std::numeric_limits<double>::infinity();
    }
    case Kind::kConstant:
    case Kind::kStep:
      break;
  }
  return std::numeric_limits<double>::infinity();
}

std::array<double, 2> LrSchedule::areas(double step, double momentum) const {
  const int exponent = std::ilogb(peak());
  const std::array<double, 2> scaled = scaledAreas(step, momentum);
  return {std::ldexp(scaled[0], exponent), std::ldexp(scaled[1], exponent)};
}

std::array<double, 2> LrSchedule::scaledAreas(double step, double momentum) const {
  ADAPREC_CHECK_ARG(std::isfinite(step) && step >= 0 && step <= kMaxAreaStep,
                    "lr schedule '" << spec_ << "': areas need a step in [0, " << std::setprecision(17) << kMaxAreaStep
                                    << "], got " << step);
  ADAPREC_CHECK_ARG(momentum >= 0 && momentum < 1, "annealing momentum must be in [0, 1), got " << momentum);
  if (kind_ == Kind::kConstant) return {step, 0.0};
  // 1 for the analytic forms (peak 1): their sums are unchanged.
  const double scale = std::ldexp(1.0, -std::ilogb(peak()));
  // Integer steps 0..ceil(step); S1 and S2 at floor(step) and the next one, then interpolated.
  const double whole = std::floor(step);
  const long last = static_cast<long>(whole);
  double s1 = 0, s2 = 0, m = 0, previous = 0;
  std::array<double, 2> below{0, 0};
  // At the top of iteration i, (s1, s2) are the areas at step i; update i adds lr(i) and m_i.
  for (long i = 0;; ++i) {
    if (i == last) below = {s1, s2};
    if (i == last + 1) break;
    const double lr = lrAt(static_cast<double>(i)) * scale;
    s1 += lr;
    // A step taken at rate 0 after one at rate 0 changes nothing: the annealing momentum's tail does not
    // count there (it made forecasts past a schedule's end keep rising while the weights stood still).
    if (i > 0 && !(lr == 0 && previous == 0)) {
      m = momentum * m + std::max(previous - lr, 0.0);
      s2 += m;
    }
    previous = lr;
  }
  // (s1, s2) are now the areas at step last + 1.
  const double f = step - whole;
  if (f == 0) return below;
  return {below[0] + f * (s1 - below[0]), below[1] + f * (s2 - below[1])};
}

}  // namespace adaprec::predictor
