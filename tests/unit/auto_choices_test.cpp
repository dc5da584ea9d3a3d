// --algo auto's choices as they cross runs (comm/auto_cache.h): export and import keep
// every field, and a malformed file imports nothing and says what is wrong.
#include <gtest/gtest.h>

#include <string>

#include "dtrain/comm/allreduce_tuner.h"

namespace dtrain::comm {
namespace {

std::string one_kind(const std::string& algorithm, const std::string& seconds) {
  return R"({"dtrain_auto_choices": 1, "kinds": [{"tag": 7, "dtype": 6, "op": 0,
    "log2_bytes": 16, "algorithm": ")" +
         algorithm + R"(", "seconds": )" + seconds + R"(,
    "candidates": {"ring": 0.002, "butterfly": 0.001, "direct": 0.003, "native": 0.004}}]})";
}

TEST(AutoChoicesTest, ImportedChoicesAreReportedAndExportedAsTheyCame) {
  AllReduceTuner tuner;
  tuner.import_choices(one_kind("butterfly", "0.001"));
  const auto* c = tuner.choice(7, at::kFloat, ReduceOp::kSum, 65536 + 100);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->algorithm, Algorithm::kButterfly);
  EXPECT_TRUE(c->from_cache);
  EXPECT_EQ(c->calibrations, 0);
  EXPECT_DOUBLE_EQ(c->seconds, 0.001);
  EXPECT_DOUBLE_EQ(c->candidates.at(Algorithm::kNative), 0.004);
  EXPECT_EQ(tuner.choice(7, at::kFloat, ReduceOp::kSum, 1 << 20), nullptr);  // another class
  AllReduceTuner again;
  again.import_choices(tuner.export_choices());
  EXPECT_EQ(again.export_choices(), tuner.export_choices());
}

TEST(AutoChoicesTest, AMalformedFileImportsNothingAndSaysWhy) {
  const std::pair<std::string, std::string> cases[] = {
      {"{", "parse error"},
      {R"({"dtrain_auto_choices": 2, "kinds": []})", "version 1"},
      {one_kind("auto", "0.001"), "cannot be auto"},
      {one_kind("tree", "0.001"), "tree"},
      {one_kind("ring", "-1"), "positive"},
      {R"({"dtrain_auto_choices": 1, "kinds": [{"tag": 1}]})", "dtype"},
  };
  for (const auto& [text, why] : cases) {
    AllReduceTuner tuner;
    try {
      tuner.import_choices(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
    EXPECT_EQ(tuner.choice(7, at::kFloat, ReduceOp::kSum, 65536), nullptr) << text;
  }
}

}  // namespace
}  // namespace dtrain::comm
