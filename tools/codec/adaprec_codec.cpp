// adaprec-codec: encode, decode or round-trip raw little-endian float32 files through a wire format.
//   adaprec-codec encode    --format fp8 in.f32 out.chunk
//   adaprec-codec decode    --format fp8 in.chunk out.f32
//   adaprec-codec roundtrip --format fp8 in.f32 out.f32        ("-" = stdin / stdout)
// The encoded file is one self-describing chunk (docs/formats.md). Errors go to stderr, exit code 1.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "adaprec/codec.hpp"
#include "adaprec/communicator.hpp"
#include "adaprec/error.hpp"
#include "adaprec/format.hpp"
#include "config/environment_variables.hpp"

namespace {

std::vector<unsigned char> readAll(const std::string& path) {
  if (path == "-") {
    std::cin >> std::noskipws;
    return std::vector<unsigned char>(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  std::ifstream in(path, std::ios::binary);
  ADAPREC_CHECK(in.good(), adaprec::ErrorCode::kIo, "cannot open '" << path << "' for reading");
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void writeAll(const std::string& path, const void* data, std::size_t bytes) {
  if (path == "-") {
    std::cout.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    std::cout.flush();
    ADAPREC_CHECK(std::cout.good(), adaprec::ErrorCode::kIo, "cannot write to stdout");
    return;
  }
  std::ofstream out(path, std::ios::binary);
  ADAPREC_CHECK(out.good(), adaprec::ErrorCode::kIo, "cannot open '" << path << "' for writing");
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  out.close();  // the bytes reach the file here: a full disk fails at the close, not at the write
  ADAPREC_CHECK(!out.fail(), adaprec::ErrorCode::kIo, "cannot write '" << path << "'");
}

std::vector<float> floatsOf(const std::vector<unsigned char>& bytes, const std::string& path) {
  ADAPREC_CHECK(bytes.size() % sizeof(float) == 0, adaprec::ErrorCode::kMalformedInput,
                "'" << path << "' has " << bytes.size() << " bytes, not a whole number of float32 values");
  std::vector<float> values(bytes.size() / sizeof(float));
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

std::vector<unsigned char> encodeFloats(adaprec::Format format, const std::vector<float>& values) {
  std::vector<unsigned char> chunk(adaprec::encodedBytes(format, values.size()));
  adaprec::encode(format, values.data(), values.size(), chunk.data(), chunk.size());
  return chunk;
}

std::vector<float> decodeChunk(adaprec::Format format, const std::vector<unsigned char>& chunk) {
  const adaprec::ChunkInfo info = adaprec::inspectChunk(chunk.data(), chunk.size());
  std::vector<float> values(info.count);
  adaprec::decode(format, chunk.data(), chunk.size(), values.data(), values.size());
  return values;
}

// The one-line verdict on the ADAPREC_* environment as it is now: "" when the library accepts it.
std::string environmentProblem() {
  try {
    adaprec::EnvironmentConfig::fromEnvironment();
    return "";
  } catch (const adaprec::Error& e) {
    return adaprec::messageForUsers(e);
  }
}

// The verdict on each set variable alone (every other ADAPREC_* variable unset for the check, then
// restored), so that every invalid value is named, not only the first the library reads.
std::map<std::string, std::string> problemsOfEachVariable() {
  std::map<std::string, std::string> set;
  for (const adaprec::detail::EnvironmentVariable& v : adaprec::detail::environmentVariables())
    if (const auto text = adaprec::detail::environmentText(v.name)) set[std::string(v.name)] = *text;
  for (const auto& [name, text] : set) ::unsetenv(name.c_str());
  std::map<std::string, std::string> problems;
  for (const auto& [name, text] : set) {
    ::setenv(name.c_str(), text.c_str(), 1);
    problems[name] = environmentProblem();
    ::unsetenv(name.c_str());
  }
  for (const auto& [name, text] : set) ::setenv(name.c_str(), text.c_str(), 1);
  return problems;
}

// The library's table of ADAPREC_* variables, with this environment's value of each and its verdict.
int printEnvironment() {
  const std::map<std::string, std::string> problems = problemsOfEachVariable();
  for (const adaprec::detail::EnvironmentVariable& v : adaprec::detail::environmentVariables()) {
    std::printf("%s\n  read by: %s\n  meaning: %s\n  valid:   %s\n  default: %s\n  ranks must agree: %s\n",
                std::string(v.name).c_str(), std::string(v.readBy).c_str(), std::string(v.meaning).c_str(),
                v.validList != nullptr ? v.validList().c_str() : std::string(v.valid).c_str(),
                std::string(v.defaultText).c_str(), v.mustAgree ? "yes" : "no");
    if (const auto text = adaprec::detail::environmentText(v.name)) {
      const auto problem = problems.find(std::string(v.name));
      const bool valid = problem == problems.end() || problem->second.empty();
      std::printf("  set to:  '%s' (%s)\n", text->c_str(), valid ? "valid" : "INVALID");
      if (!valid) std::fprintf(stderr, "adaprec-codec: %s\n", problem->second.c_str());
    }
  }
  // Values valid alone may still be refused together (ADAPREC_ALGO=native with a format native
  // cannot carry).
  const std::string together = environmentProblem();
  const bool eachValid = std::all_of(problems.begin(), problems.end(), [](const auto& p) { return p.second.empty(); });
  if (eachValid && !together.empty()) std::fprintf(stderr, "adaprec-codec: %s\n", together.c_str());
  return together.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"adaprec-codec: convert raw little-endian float32 data to and from AdaPrec wire formats"};
  app.require_subcommand(1);
  std::string formatName, input, output;
  auto addArgs = [&](CLI::App* sub, const char* inWhat, const char* outWhat) {
    sub->add_option("-f,--format", formatName, "wire format: " + adaprec::validFormatNames())->required();
    sub->add_option("input", input, inWhat)->required();
    sub->add_option("output", output, outWhat)->required();
  };
  CLI::App* enc = app.add_subcommand("encode", "float32 file -> one encoded chunk");
  addArgs(enc, "float32 input file or -", "chunk output file or -");
  CLI::App* dec = app.add_subcommand("decode", "encoded chunk -> float32 file");
  addArgs(dec, "chunk input file or -", "float32 output file or -");
  CLI::App* rt = app.add_subcommand("roundtrip", "float32 -> format -> float32 (what the wire does to the values)");
  addArgs(rt, "float32 input file or -", "float32 output file or -");
  CLI::App* env = app.add_subcommand("env", "every ADAPREC_* environment variable: valid values, default, and "
                                            "whether each of this process's values is valid");
  CLI11_PARSE(app, argc, argv);
  if (env->parsed()) return printEnvironment();

  try {
    const adaprec::Format format = adaprec::parseFormat(formatName);
    const std::vector<unsigned char> in = readAll(input);
    if (enc->parsed()) {
      const auto chunk = encodeFloats(format, floatsOf(in, input));
      writeAll(output, chunk.data(), chunk.size());
    } else if (dec->parsed()) {
      const auto values = decodeChunk(format, in);
      writeAll(output, values.data(), values.size() * sizeof(float));
    } else {
      const auto values = decodeChunk(format, encodeFloats(format, floatsOf(in, input)));
      writeAll(output, values.data(), values.size() * sizeof(float));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "adaprec-codec: %s\n", adaprec::messageForUsers(e).c_str());
    return 1;
  }
  return 0;
}
