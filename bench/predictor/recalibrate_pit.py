#!/usr/bin/python3
"""Would a recalibration learned from finished runs fix the predictor's coverage? An evaluation, not
part of the library.

Reads the PIT file of adaprec-predictor-bench --pit-csv (rows source,cutoff,method,set,curve,pit,lpd:
pit = the predictive CDF at the held-out final value, lpd = its log density). For every cutoff and
method it fits a Beta(a, b) distribution to PITs by maximum likelihood and uses its CDF as a map of
the predictive CDF (quantile recalibration, Kuleshov et al. 2018, with a smooth map so that densities
stay defined): recalibrated CDF B(F(y)), log density log f(y) + log beta(F(y)); the 90% band is
F^-1 of the Beta's 5% and 95% quantiles. Prints, per cutoff and method, the final-value LPD before
and after (with the paired per-set difference and its standard error), 90% and 50% coverage, and the
mean Beta parameters (a, b > 1: the predictive is too wide).

  recalibrate_pit.py PIT.csv                 each set's map fitted on the other sets of the same file
  recalibrate_pit.py --fit CORPUS.csv PIT.csv the map fitted on all of CORPUS.csv, applied to PIT.csv

Needs python3-numpy and python3-scipy (Debian).
"""
import argparse
import csv
from collections import defaultdict

import numpy as np
from scipy import stats

CLIP = 1e-6  # a PIT of exactly 0 or 1 (a value outside the truncated band) keeps a finite Beta density


def load(path):
    """{(cutoff, method): (sets, pits, lpds)} as numpy arrays."""
    rows = defaultdict(list)
    with open(path) as f:
        for source, cutoff, method, set_id, _curve, pit, lpd in csv.reader(f):
            rows[(int(cutoff), method)].append((int(set_id), float(pit), float(lpd)))
    out = {}
    for key, values in rows.items():
        a = np.array(values)
        out[key] = (a[:, 0].astype(int), np.clip(a[:, 1], CLIP, 1 - CLIP), a[:, 2])
    return out


def fit_beta(pits):
    a, b, _, _ = stats.beta.fit(pits, floc=0, fscale=1)
    return a, b


def report(key, sets, pits, lpds, params):
    """params[i]: the (a, b) applied to value i."""
    a = np.array([p[0] for p in params])
    b = np.array([p[1] for p in params])
    recal = lpds + stats.beta.logpdf(pits, a, b)
    lo, hi = stats.beta.ppf(0.05, a, b), stats.beta.ppf(0.95, a, b)
    lo50, hi50 = stats.beta.ppf(0.25, a, b), stats.beta.ppf(0.75, a, b)
    ids = np.unique(sets)
    diff = np.array([recal[sets == s].mean() - lpds[sets == s].mean() for s in ids])
    se = diff.std(ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else float("nan")
    cutoff, method = key
    print(f"{cutoff:3d}% {method:5s} {len(ids):3d} sets | LPD {lpds.mean():6.3f} -> {recal.mean():6.3f} "
          f"(paired {diff.mean():+.3f} +- {se:.3f}) | cov90 {np.mean((pits >= 0.05) & (pits <= 0.95)):.3f} -> "
          f"{np.mean((pits >= lo) & (pits <= hi)):.3f} | cov50 {np.mean((pits >= 0.25) & (pits <= 0.75)):.3f} -> "
          f"{np.mean((pits >= lo50) & (pits <= hi50)):.3f} | beta a {a.mean():.2f} b {b.mean():.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fit", help="PIT file the maps are fitted on (default: leave one set out of PIT)")
    parser.add_argument("pit", help="PIT file to recalibrate and score")
    args = parser.parse_args()
    data = load(args.pit)
    corpus = load(args.fit) if args.fit else None
    print("cutoff method sets | final LPD raw -> recalibrated | 90% coverage | 50% coverage | Beta map")
    for key in sorted(data):
        sets, pits, lpds = data[key]
        if corpus is not None:
            if key not in corpus:
                print(f"{key}: not in {args.fit}, skipped")
                continue
            params = [fit_beta(corpus[key][1])] * len(pits)
        else:
            by_set = {s: fit_beta(pits[sets != s]) for s in np.unique(sets)}
            params = [by_set[s] for s in sets]
        report(key, sets, pits, lpds, params)


if __name__ == "__main__":
    main()
