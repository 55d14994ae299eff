// readCurvesCsv(): the CSV input of adaprec-predict. Every error names the line it found it on.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <istream>
#include <map>
#include <string>

#include "adaprec/error.hpp"
#include "adaprec/predictor.hpp"

namespace adaprec::predictor {

namespace {
std::string trim(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  const auto end = s.find_last_not_of(" \t\r");
  return s.substr(begin, end - begin + 1);
}

std::vector<std::string> splitFields(const std::string& line) {
  std::vector<std::string> fields;
  std::size_t start = 0;
  while (true) {
    const auto comma = line.find(',', start);
    fields.push_back(trim(line.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return fields;
}

double parseNumber(const std::string& field, const char* column, long line) {
  double value = 0;
  const char* begin = field.data();
  const char* end = begin + field.size();
  if (begin != end && *begin == '+') ++begin;
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  ADAPREC_CHECK(ec == std::errc() && ptr == end && begin != end && std::isfinite(value),
                ErrorCode::kMalformedInput,
                "line " << line << ": column '" << column << "' is not a finite number: '" << field << "'");
  return value;
}

// An id column (curve, run): a non-negative integer.
long parseId(const std::string& field, const char* column, long line) {
  const double raw = parseNumber(field, column, line);
  ADAPREC_CHECK(raw >= 0 && raw == std::floor(raw) && raw < 1e9, ErrorCode::kMalformedInput,
                "line " << line << ": " << column << " must be a non-negative integer, got '" << field << "'");
  return static_cast<long>(raw);
}
}  // namespace

CurveTable readCurvesCsv(std::istream& in) {
  std::string text;
  long lineNumber = 0;
  int stepColumn = -1, valueColumn = -1, curveColumn = -1, countColumn = -1, runColumn = -1, wallColumn = -1;
  std::size_t columnCount = 0;
  // Header: the first line that is neither blank nor a '#' comment.
  while (std::getline(in, text)) {
    ++lineNumber;
    // A UTF-8 byte order mark (spreadsheet exports) is not part of the first column's name.
    if (lineNumber == 1 && text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);
    const std::string line = trim(text);
    if (line.empty() || line[0] == '#') continue;
    const std::vector<std::string> names = splitFields(line);
    columnCount = names.size();
    for (std::size_t i = 0; i < names.size(); ++i) {
      std::string name = names[i];
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return std::tolower(ch); });
      int* slot = name == "step" ? &stepColumn : name == "value" ? &valueColumn
                : name == "curve" ? &curveColumn : name == "n" ? &countColumn
                : name == "run" ? &runColumn
                // TensorBoard's CSV export is "Wall time,Step,Value": the time is read by nothing.
                : name == "wall time" || name == "wall_time" ? &wallColumn : nullptr;
      ADAPREC_CHECK(slot != nullptr, ErrorCode::kMalformedInput,
                    "line " << lineNumber << ": unknown column '" << names[i]
                            << "' (expected step, value and optionally curve, n, run, wall time)");
      ADAPREC_CHECK(*slot < 0, ErrorCode::kMalformedInput,
                    "line " << lineNumber << ": column '" << name << "' appears twice");
      *slot = static_cast<int>(i);
    }
    break;
  }
  ADAPREC_CHECK(columnCount > 0, ErrorCode::kMalformedInput, "line " << lineNumber + 1 << ": no header line");
  ADAPREC_CHECK(stepColumn >= 0 && valueColumn >= 0, ErrorCode::kMalformedInput,
                "line " << lineNumber << ": the header must name columns 'step' and 'value'");

  using Key = std::pair<long, long>;  // (run, curve)
  std::map<Key, Curve> byId;
  std::map<Key, long> lastLine;
  while (std::getline(in, text)) {
    ++lineNumber;
    const std::string line = trim(text);
    if (line.empty() || line[0] == '#') continue;
    const std::vector<std::string> fields = splitFields(line);
    ADAPREC_CHECK(fields.size() == columnCount, ErrorCode::kMalformedInput,
                  "line " << lineNumber << ": " << fields.size() << " fields, the header has " << columnCount);
    const double step = parseNumber(fields[stepColumn], "step", lineNumber);
    const double value = parseNumber(fields[valueColumn], "value", lineNumber);
    const long id = curveColumn >= 0 ? parseId(fields[curveColumn], "curve", lineNumber) : 0;
    const long run = runColumn >= 0 ? parseId(fields[runColumn], "run", lineNumber) : 0;
    const Key key{run, id};
    ADAPREC_CHECK(step >= 0, ErrorCode::kMalformedInput, "line " << lineNumber << ": step must be >= 0, got " << step);
    ADAPREC_CHECK(value >= 0 && value <= 1, ErrorCode::kMalformedInput,
                  "line " << lineNumber << ": value must be in [0, 1], got " << value);
    Curve& curve = byId[key];
    ADAPREC_CHECK(curve.steps.empty() || step > curve.steps.back(), ErrorCode::kMalformedInput,
                  "line " << lineNumber << ": step " << step << " of curve " << id
                          << (runColumn >= 0 ? " of run " + std::to_string(run) : std::string())
                          << " does not follow step " << (curve.steps.empty() ? 0.0 : curve.steps.back())
                          << " (line " << lastLine[key] << "); steps of a curve must increase");
    curve.steps.push_back(step);
    curve.values.push_back(value);
    if (countColumn >= 0) {
      const double n = parseNumber(fields[countColumn], "n", lineNumber);
      ADAPREC_CHECK(n > 0, ErrorCode::kMalformedInput, "line " << lineNumber << ": n must be > 0, got " << n);
      curve.sampleCounts.push_back(n);
    }
    lastLine[key] = lineNumber;
  }
  ADAPREC_CHECK(!byId.empty(), ErrorCode::kMalformedInput, "line " << lineNumber << ": no data rows after the header");
  CurveTable table;
  for (auto& [key, curve] : byId) {
    table.runs.push_back(key.first);
    table.ids.push_back(key.second);
    table.curves.push_back(std::move(curve));
  }
  return table;
}

std::vector<std::vector<Curve>> curvesByRun(const CurveTable& table) {
  std::vector<std::vector<Curve>> runs;
  for (std::size_t i = 0; i < table.curves.size(); ++i) {
    if (i == 0 || table.runs[i] != table.runs[i - 1]) runs.emplace_back();
    runs.back().push_back(table.curves[i]);
  }
  return runs;
}

}  // namespace adaprec::predictor
