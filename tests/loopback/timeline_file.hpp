// Reading a timeline file (docs/timeline.md) with its tolerant rule: the closing bracket may be missing
// (a rank killed, or still running, after its last flush), and a last line cut by a kill mid-write is
// dropped.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace adaprec::test {

inline nlohmann::json parseTimelineText(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (!text.empty() && text.back() == ']') return nlohmann::json::parse(text);
  nlohmann::json parsed = nlohmann::json::parse(text + "\n]", nullptr, false);
  if (!parsed.is_discarded()) return parsed;
  // A cut last line: keep the whole lines before it.
  return nlohmann::json::parse(text.substr(0, text.rfind('\n')) + "\n]");
}

inline std::string readTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace adaprec::test
