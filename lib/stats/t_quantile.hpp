// The one-sided 90 % quantile of Student's t, for the library's "shown faster at 90 %" tests: the
// controller's not_faster verdict (lib/controller/pruning.hpp) and --reduction auto's choice of overlap
// (lib/trainer/reduction_tuner.hpp). Header-only: the trainer is built without the controller too.
#pragma once

#include <cmath>
#include <cstddef>

#include "adaprec/error.hpp"

namespace adaprec::stats {

inline constexpr double kOneSided90 = 0.90;

// t(0.90, dof) for dof > 0: a table for dof 1..10 (a fractional dof rounds up, towards the smaller
// quantile's neighbour); beyond, the Cornish-Fisher expansion around the normal quantile (within 0.001
// of the exact value from dof 10 on).
inline double tQuantile90(double dof) {
  ADAPREC_CHECK_ARG(dof > 0, "t quantile with " << dof << " degrees of freedom");
  static constexpr double kTable[] = {3.0777, 1.8856, 1.6377, 1.5332, 1.4759, 1.4398, 1.4149, 1.3968, 1.3830, 1.3722};
  if (dof <= 10) return kTable[static_cast<std::size_t>(std::ceil(dof)) - 1];
  const double z = 1.2815516;  // the normal's 90 % quantile
  const double z3 = z * z * z;
  return z + (z3 + z) / (4 * dof) + (5 * z3 * z * z + 16 * z3 + 3 * z) / (96 * dof * dof);
}

}  // namespace adaprec::stats
