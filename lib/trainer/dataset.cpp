#include "dataset.hpp"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "adaprec/error.hpp"

namespace adaprec::trainer {
namespace {

// Pixel statistics of Fashion-MNIST's training set; MNIST's differ a little but any fixed affine map
// works for training, and a fixed one keeps every rank and every split identical.
constexpr float kPixelMean = 0.2860f;
constexpr float kPixelStd = 0.3530f;

std::string findFile(const std::string& dir, const std::string& stem) {
  namespace fs = std::filesystem;
  for (const char* suffix : {".gz", ""}) {
    fs::path p = fs::path(dir) / (stem + suffix);
    if (fs::is_regular_file(p)) return p.string();
  }
  ADAPREC_FAIL(ErrorCode::kIo, "data file missing: " << (fs::path(dir) / (stem + ".gz")).string()
                                                     << " (nor " << stem << " uncompressed)");
}

// gzread transparently reads uncompressed files too.
std::vector<std::uint8_t> readAll(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  ADAPREC_CHECK(f != nullptr, ErrorCode::kIo, "cannot open data file " << path);
  std::vector<std::uint8_t> out;
  std::vector<std::uint8_t> chunk(1 << 20);
  for (;;) {
    int n = gzread(f, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int errnum = 0;
      std::string msg = gzerror(f, &errnum);
      gzclose(f);
      ADAPREC_FAIL(ErrorCode::kMalformedInput, "corrupt data file " << path << ": " << msg);
    }
    if (n == 0) break;
    out.insert(out.end(), chunk.begin(), chunk.begin() + n);
  }
  int rc = gzclose(f);
  ADAPREC_CHECK(rc == Z_OK, ErrorCode::kMalformedInput,
                "corrupt data file " << path << ": truncated or bad gzip trailer");
  return out;
}

std::uint32_t bigEndian32(const std::vector<std::uint8_t>& b, std::size_t at) {
  return (std::uint32_t{b[at]} << 24) | (std::uint32_t{b[at + 1]} << 16) |
         (std::uint32_t{b[at + 2]} << 8) | std::uint32_t{b[at + 3]};
}

// IDX: magic 0x0000 08 <ndim>, then ndim big-endian uint32 sizes, then uint8 data.
std::vector<std::uint32_t> parseIdxHeader(const std::vector<std::uint8_t>& bytes,
                                          const std::string& path, unsigned expectDims,
                                          std::size_t* dataOffset) {
  ADAPREC_CHECK(bytes.size() >= 4 + 4 * expectDims, ErrorCode::kMalformedInput,
                "corrupt data file " << path << ": " << bytes.size() << " bytes is too short for an IDX header");
  ADAPREC_CHECK(bytes[0] == 0 && bytes[1] == 0 && bytes[2] == 0x08 && bytes[3] == expectDims,
                ErrorCode::kMalformedInput,
                "corrupt data file " << path << ": not a uint8 IDX file with " << expectDims << " dimensions");
  std::vector<std::uint32_t> dims;
  std::size_t expect = 1;
  for (unsigned d = 0; d < expectDims; ++d) {
    dims.push_back(bigEndian32(bytes, 4 + 4 * d));
    expect *= dims.back();
  }
  *dataOffset = 4 + 4 * expectDims;
  ADAPREC_CHECK(bytes.size() == *dataOffset + expect, ErrorCode::kMalformedInput,
                "corrupt data file " << path << ": header promises " << expect << " bytes of data, file has "
                                     << bytes.size() - *dataOffset);
  return dims;
}

}  // namespace

void Dataset::truncate(std::size_t limit) {
  if (limit == 0 || limit >= count()) return;
  labels.resize(limit);
  pixels.resize(limit * pixelsPerImage());
}

void Dataset::gather(std::span<const std::uint32_t> indices, float* images, std::int32_t* labelsOut) const {
  const std::size_t ppi = pixelsPerImage();
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const std::uint8_t* src = pixels.data() + static_cast<std::size_t>(indices[i]) * ppi;
    float* dst = images + i * ppi;
    for (std::size_t p = 0; p < ppi; ++p) dst[p] = (src[p] * (1.0f / 255.0f) - kPixelMean) / kPixelStd;
    labelsOut[i] = labels[indices[i]];
  }
}

Dataset loadIdxDataset(const std::string& dir, Split split) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const std::string imagePath = findFile(dir, prefix + "-images-idx3-ubyte");
  const std::string labelPath = findFile(dir, prefix + "-labels-idx1-ubyte");

  Dataset ds;
  std::size_t offset = 0;
  std::vector<std::uint8_t> imageBytes = readAll(imagePath);
  auto idims = parseIdxHeader(imageBytes, imagePath, 3, &offset);
  ADAPREC_CHECK(idims[0] > 0 && idims[1] > 0 && idims[2] > 0, ErrorCode::kMalformedInput,
                "corrupt data file " << imagePath << ": empty image dimensions");
  ds.rows = static_cast<int>(idims[1]);
  ds.cols = static_cast<int>(idims[2]);
  ds.pixels.assign(imageBytes.begin() + static_cast<std::ptrdiff_t>(offset), imageBytes.end());

  std::vector<std::uint8_t> labelBytes = readAll(labelPath);
  auto ldims = parseIdxHeader(labelBytes, labelPath, 1, &offset);
  ADAPREC_CHECK(ldims[0] == idims[0], ErrorCode::kMalformedInput,
                "corrupt data file " << labelPath << ": " << ldims[0] << " labels for " << idims[0]
                                     << " images in " << imagePath);
  ds.labels.assign(labelBytes.begin() + static_cast<std::ptrdiff_t>(offset), labelBytes.end());
  int maxLabel = *std::max_element(ds.labels.begin(), ds.labels.end());
  ADAPREC_CHECK(maxLabel < 256, ErrorCode::kInternal, "uint8 label out of range");
  ds.classes = std::max(10, maxLabel + 1);
  ds.description = prefix + " split of " + dir;
  return ds;
}

Dataset makeSyntheticDataset(std::size_t count, int rows, int cols, int classes, std::uint64_t seed) {
  ADAPREC_CHECK_ARG(count > 0 && rows > 0 && cols > 0 && classes >= 2,
                    "synthetic data set needs count, rows, cols > 0 and >= 2 classes");
  Dataset ds;
  ds.rows = rows;
  ds.cols = cols;
  ds.classes = classes;
  ds.description = "SYNTHETIC data set (" + std::to_string(count) + " images, " + std::to_string(classes) +
                   " classes, seed " + std::to_string(seed) + ")";
  const std::size_t ppi = ds.pixelsPerImage();
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> pixel(0, 255);
  std::vector<std::uint8_t> prototypes(static_cast<std::size_t>(classes) * ppi);
  for (auto& p : prototypes) p = static_cast<std::uint8_t>(pixel(rng));
  std::normal_distribution<float> noise(0.0f, 40.0f);
  std::uniform_int_distribution<int> label(0, classes - 1);
  ds.pixels.resize(count * ppi);
  ds.labels.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    int c = label(rng);
    ds.labels[i] = static_cast<std::uint8_t>(c);
    for (std::size_t p = 0; p < ppi; ++p) {
      float v = prototypes[c * ppi + p] + noise(rng);
      ds.pixels[i * ppi + p] = static_cast<std::uint8_t>(std::clamp(v, 0.0f, 255.0f));
    }
  }
  return ds;
}

}  // namespace adaprec::trainer
