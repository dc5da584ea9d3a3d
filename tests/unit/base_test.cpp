// The strict integer parser and the enum name tables every flag goes through.
#include <gtest/gtest.h>

#include "dtrain/base/names.h"
#include "dtrain/base/parse.h"

namespace dtrain {
namespace {

TEST(ParseIntegerTest, WholeTextWithinBoundsOnly) {
  EXPECT_EQ(parse_integer("42", 0, 100), 42);
  EXPECT_EQ(parse_integer("-3", -5, 5), -3);
  EXPECT_EQ(parse_integer("0", 0, 0), 0);
  for (const char* bad : {"", " 4", "4 ", "+4", "4x", "x", "0x10", "1e3", "4.0", "--4"})
    EXPECT_FALSE(parse_integer(bad, -1000, 1000)) << "'" << bad << "'";
  EXPECT_FALSE(parse_integer("101", 0, 100));
  EXPECT_FALSE(parse_integer("-1", 0, 100));
  EXPECT_FALSE(parse_integer("99999999999999999999999", 0, INT64_MAX));
}

enum class Colour { kRed, kGreen, kBlue };

TEST(EnumNamesTest, ParseAndPrintReadOneTable) {
  const EnumNames<Colour> names(
      "colour", {{Colour::kRed, "red"}, {Colour::kGreen, "green"}, {Colour::kBlue, "blue"}});
  for (const Colour c : {Colour::kRed, Colour::kGreen, Colour::kBlue})
    EXPECT_EQ(names.parse(names.to_string(c)), c);
  EXPECT_EQ(names.choices(), "red, green or blue");
  try {
    names.parse("purple");
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "unknown colour 'purple' (red, green or blue)");
  }
}

}  // namespace
}  // namespace dtrain
