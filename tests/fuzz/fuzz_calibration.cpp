// libFuzzer harness: calibration files (ADAPREC_CALIBRATION, lib/algorithm/cost_model.hpp), which a
// job reads from a shared filesystem and which may be stale, truncated or edited by hand.
//
// Findings besides crashes and sanitizer reports: an exception (the parser reports problems through
// its `why` string, never by throwing); a rejection without a reason; an accepted calibration that does
// not survive serialization (parse(serialize(c)) must equal c, and serialize a fixed point); the
// topology check disagreeing with the parsed topology; a prediction from an accepted calibration
// that is negative or not finite (on host buffers, and with a device line on device buffers, staged
// never cheaper than direct).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "algorithm/cost_model.hpp"
#include "fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace adaprec;
  using namespace adaprec::detail;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string why;
  const std::optional<Calibration> c = parseCalibrationText(text, why);
  if (!c) {
    FUZZ_REQUIRE(!why.empty());
    return 0;
  }
  const std::string printed = serializeCalibration(*c);
  std::string again;
  const std::optional<Calibration> reparsed = parseCalibrationText(printed, again);
  FUZZ_REQUIRE(reparsed && *reparsed == *c);
  FUZZ_REQUIRE(serializeCalibration(*reparsed) == printed);
  std::string checked;
  FUZZ_REQUIRE(parseCalibration(text, c->topology, checked).has_value());
  CalibrationTopology other = c->topology;
  other.ranks += 1;
  FUZZ_REQUIRE(!parseCalibration(text, other, checked).has_value() && !checked.empty());
  if (c->topology.ranks >= 2 && c->topology.ranks <= 4096 && c->topology.nodes >= 1 && c->topology.ranksPerNode >= 1) {
    for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kTwoShot, Algorithm::kNative}) {
      const double t = predictSeconds(*c, algorithm, Format::kFp32, 1000);
      FUZZ_REQUIRE(std::isfinite(t) && t >= 0);
      // The device's figures (a device line makes fp32's device_codec line required): direct always,
      // staged where the staging was measured.
      if (c->device) {
        const double direct = predictSeconds(*c, algorithm, Format::kFp32, 1000, Placement{true, true});
        FUZZ_REQUIRE(std::isfinite(direct) && direct >= 0);
        if (c->device->stagingSecondsPerByte >= 0) {
          const double staged = predictSeconds(*c, algorithm, Format::kFp32, 1000, Placement{true, false});
          FUZZ_REQUIRE(std::isfinite(staged) && staged >= direct);
        }
      }
    }
  }
  return 0;
}
