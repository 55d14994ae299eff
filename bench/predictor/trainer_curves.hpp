// Real learning curves from adaprec-train, checked in as bench/predictor/trainer_curves.csv (written by
// make_trainer_curves.sh): sets of branches from one checkpoint, one branch per wire format.
#pragma once

#include <string>
#include <vector>

#include "adaprec/predictor.hpp"

namespace adaprec::bench {

struct BranchSet {
  std::string label;                     // e.g. "mlp seed 1 lr 0.02 from step 100"
  std::vector<predictor::Curve> curves;  // one per branch, steps > 0 counted from the checkpoint
  // The checkpoint's evaluation on the same images (step 0), shared by every branch.
  double anchorStep = 0, anchorValue = 0, anchorCount = 0;
};

// Reads the CSV (header set,curve,model,seed,lr,start,format,step,value,n); throws adaprec::Error naming
// the line on malformed input.
std::vector<BranchSet> loadTrainerCurves(const std::string& path);

// Prepends the shared checkpoint point to every curve of the set.
std::vector<predictor::Curve> withAnchor(const BranchSet& set);

}  // namespace adaprec::bench
