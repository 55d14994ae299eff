// Image classification data sets for the embedded trainer: MNIST-format IDX files (gzipped or not,
// read with zlib) or an explicitly requested synthetic set. Pixels stay uint8 in memory (one copy per
// rank is cheap this way) and are normalized when a mini-batch is gathered.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace adaprec::trainer {

// Debian's dataset-fashion-mnist package installs here.
inline constexpr const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct Dataset {
  std::string description;           // e.g. "fashion-mnist train (/usr/share/...)" or "synthetic ..."
  int rows = 0;                      // image height
  int cols = 0;                      // image width
  int classes = 10;
  std::vector<std::uint8_t> pixels;  // count * rows * cols, row-major per image
  std::vector<std::uint8_t> labels;  // count

  std::size_t count() const { return labels.size(); }
  std::size_t pixelsPerImage() const { return static_cast<std::size_t>(rows) * cols; }
  // Keeps the first `limit` images (0 keeps all); used to make runs and tests short.
  void truncate(std::size_t limit);
  // Writes the normalized pixels of images `indices` (batch x rows*cols floats) and their labels.
  void gather(std::span<const std::uint32_t> indices, float* images, std::int32_t* labelsOut) const;
};

enum class Split { kTrain, kTest };

// Reads `<dir>/train-images-idx3-ubyte[.gz]` + labels (or t10k-* for kTest). Throws adaprec::Error
// (kIo for a missing file, kMalformedInput for a corrupt one) with a one-line message naming the file.
Dataset loadIdxDataset(const std::string& dir, Split split);

// A clearly labelled synthetic set: `classes` random prototype images plus per-image noise, so that a
// model can learn it; deterministic in `seed`.
Dataset makeSyntheticDataset(std::size_t count, int rows, int cols, int classes, std::uint64_t seed);

}  // namespace adaprec::trainer
