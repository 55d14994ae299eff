// Format names: one table, stable ids, parse/print round trip, helpful errors.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "adaprec/error.hpp"
#include "adaprec/format.hpp"

using namespace adaprec;

TEST_CASE("format names round trip and ids are stable", "[format]") {
  std::set<std::string> names;
  for (Format f : allFormats()) {
    const std::string name(formatName(f));
    CHECK(parseFormat(name) == f);
    CHECK(isFormatId(static_cast<std::uint8_t>(f)));
    names.insert(name);
  }
  CHECK(names.size() == 20);
  CHECK(static_cast<int>(Format::kFp32) == 1);
  CHECK(static_cast<int>(Format::kE4m3) == 6);
  CHECK(static_cast<int>(Format::kTable8) == 18);
  CHECK(tableBits(Format::kTable5) == 5);
  CHECK(static_cast<int>(Format::kTable3z) == 23);
  CHECK(static_cast<int>(Format::kTable8z) == 28);
  CHECK(parseFormat("table4z") == Format::kTable4z);
  CHECK(tableBits(Format::kTable3z) == 3);
  CHECK_FALSE(tryParseFormat("table2z").has_value());
  CHECK(tableBits(Format::kTable8z) == 8);
  CHECK(bitsPerElement(Format::kTable6z) == 6);
  CHECK(hasZeroCode(Format::kTable3z));
  CHECK_FALSE(hasZeroCode(Format::kTable3));
  CHECK_FALSE(hasZeroCode(Format::kFp8));
  CHECK_FALSE(isFormatId(22));
  CHECK_FALSE(isFormatId(29));
  CHECK(tableBits(Format::kFp8) == 0);
  CHECK(bitsPerElement(Format::kTable3) == 3);
  CHECK(bitsPerElement(Format::kBf16) == 16);
  CHECK(isLossless(Format::kFp32));
  CHECK_FALSE(isLossless(Format::kFp16));
}

TEST_CASE("unknown names list the valid ones", "[format]") {
  try {
    parseFormat("fp9");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    const std::string what = e.what();
    CHECK(what.find("fp9") != std::string::npos);
    CHECK(what.find("table8") != std::string::npos);
  }
}

TEST_CASE("format specs: modifiers and library choices", "[format]") {
  CHECK(parseFormatSpec("table1+ef") == FormatSpec{Selection::kFixed, Format::kTable1, true});
  CHECK(parseFormatSpec("fp8") == FormatSpec{Selection::kFixed, Format::kFp8, false});
  CHECK(parseFormatSpec("fastest").selection == Selection::kFastest);
  CHECK(parseFormatSpec("adaptive").selection == Selection::kAdaptive);
  CHECK(toString(parseFormatSpec("fp8s+ef")) == "fp8s+ef");
  CHECK_THROWS_AS(parseFormatSpec("+ef"), Error);
  CHECK_THROWS_AS(parseFormatSpec("fp8+ef+ef"), Error);
  CHECK_THROWS_AS(parseFormatSpec(""), Error);
}
