#include "trainer_curves.hpp"

#include <fstream>
#include <map>
#include <sstream>

#include "adaprec/error.hpp"

namespace adaprec::bench {

std::vector<BranchSet> loadTrainerCurves(const std::string& path) {
  std::ifstream in(path);
  ADAPREC_CHECK(in.good(), ErrorCode::kInvalidArgument, "cannot open " << path);
  std::string line;
  std::getline(in, line);
  ADAPREC_CHECK(line == "set,curve,model,seed,lr,start,format,step,value,n", ErrorCode::kMalformedInput,
                path << ": unexpected header '" << line << "'");
  std::map<int, BranchSet> sets;
  std::map<std::pair<int, int>, predictor::Curve> curves;
  for (int lineNo = 2; std::getline(in, line); ++lineNo) {
    if (line.empty()) continue;
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) f.push_back(cell);
    ADAPREC_CHECK(f.size() == 10, ErrorCode::kMalformedInput, path << ":" << lineNo << ": expected 10 fields");
    try {
      const int s = std::stoi(f[0]), c = std::stoi(f[1]);
      const double step = std::stod(f[7]), value = std::stod(f[8]), n = std::stod(f[9]);
      BranchSet& set = sets[s];
      set.label = f[2] + " seed " + f[3] + " lr " + f[4] + " from step " + f[5];
      if (step == 0) {
        set.anchorValue = value;
        set.anchorCount = n;
        continue;
      }
      predictor::Curve& curve = curves[{s, c}];
      curve.steps.push_back(step);
      curve.values.push_back(value);
      curve.sampleCounts.push_back(n);
    } catch (const std::logic_error&) {
      ADAPREC_FAIL(ErrorCode::kMalformedInput, path << ":" << lineNo << ": not a number in '" << line << "'");
    }
  }
  for (auto& [key, curve] : curves) {
    predictor::validateCurves({curve});
    sets[key.first].curves.push_back(std::move(curve));
  }
  std::vector<BranchSet> out;
  for (auto& [s, set] : sets) out.push_back(std::move(set));
  return out;
}

std::vector<predictor::Curve> withAnchor(const BranchSet& set) {
  std::vector<predictor::Curve> out = set.curves;
  for (predictor::Curve& c : out) {
    c.steps.insert(c.steps.begin(), set.anchorStep);
    c.values.insert(c.values.begin(), set.anchorValue);
    if (!c.sampleCounts.empty()) c.sampleCounts.insert(c.sampleCounts.begin(), set.anchorCount);
  }
  return out;
}

}  // namespace adaprec::bench
