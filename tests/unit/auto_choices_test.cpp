// --algo auto's choices as they cross runs (comm/auto_cache.h): export and import keep
// every field, and a malformed file imports nothing and says what is wrong; and the rule
// by which a choice's drift calibrates its kind again.
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
  // Without a calibration_s: every candidate once a turn, kMinCalibrationTurns turns.
  EXPECT_DOUBLE_EQ(c->calibration_s, 0.010 * AllReduceTuner::kMinCalibrationTurns);
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
      {R"({"dtrain_auto_choices": 1, "kinds": [{"tag": 7, "dtype": 6, "op": 0,
          "log2_bytes": 16, "algorithm": "ring", "seconds": 0.001, "calibration_s": -2,
          "candidates": {"ring": 0.001}}]})",
       "positive"},
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

// The re-check's rule (AllReduceTuner::recalibrates), on numbers: the first check sets the
// steady time; a later drift of more than half either way from it recalibrates at the second
// check in a row, once the drift, summed over the checks times the calls each covers, would
// have paid for a calibration; a first check far off the calibration recalibrates at once.
TEST(AutoChoicesTest, ADriftRecalibratesOnceItWouldHavePaidForTheCalibration) {
  const double calls = AllReduceTuner::kRecheckCalls;
  AllReduceTuner::Choice small;  // a 4 KiB kind on loopback: 40 us, calibrated in 12 ms
  small.seconds = 40e-6;
  small.calibration_s = 12e-3;
  AllReduceTuner::Drift drift;
  // Calls in a row run at 75 us, not the calibration's 40: the steady time, no drift.
  EXPECT_FALSE(AllReduceTuner::recalibrates(drift, 75e-6, small));
  EXPECT_DOUBLE_EQ(drift.reference_s, 75e-6);
  for (int check = 0; check < 20; ++check)  // within half either way: never a drift
    EXPECT_FALSE(AllReduceTuner::recalibrates(drift, check % 2 ? 110e-6 : 51e-6, small));
  EXPECT_EQ(drift.checks, 0);
  // 116 us (1.55x): 4.1 ms a check, so the third check in a row pays for the calibration.
  EXPECT_FALSE(AllReduceTuner::recalibrates(drift, 116e-6, small));
  EXPECT_FALSE(AllReduceTuner::recalibrates(drift, 116e-6, small));
  EXPECT_EQ(drift.checks, 2);
  EXPECT_NEAR(drift.seconds, 2 * 41e-6 * calls, 1e-12);
  EXPECT_TRUE(AllReduceTuner::recalibrates(drift, 116e-6, small));
  EXPECT_EQ(drift.reference_s, 0);  // cleared: the next check sets the steady time anew
  EXPECT_EQ(drift.checks, 0);
  // A check in band clears what drifted before it.
  AllReduceTuner::Drift noisy;
  EXPECT_FALSE(AllReduceTuner::recalibrates(noisy, 75e-6, small));
  EXPECT_FALSE(AllReduceTuner::recalibrates(noisy, 116e-6, small));
  EXPECT_FALSE(AllReduceTuner::recalibrates(noisy, 116e-6, small));
  EXPECT_FALSE(AllReduceTuner::recalibrates(noisy, 80e-6, small));
  EXPECT_EQ(noisy.checks, 0);
  EXPECT_FALSE(AllReduceTuner::recalibrates(noisy, 116e-6, small));
  EXPECT_FALSE(AllReduceTuner::recalibrates(noisy, 116e-6, small));
  // A link reshaped from 25 ms one way to none: 52 ms a call calibrated in 3 s, now 0.1 ms.
  // Right after the calibration: the first check recalibrates. Later: the second drifted one.
  AllReduceTuner::Choice slow_link;
  slow_link.seconds = 52e-3;
  slow_link.calibration_s = 3.0;
  AllReduceTuner::Drift at_once;
  EXPECT_TRUE(AllReduceTuner::recalibrates(at_once, 0.1e-3, slow_link));
  AllReduceTuner::Drift later;
  EXPECT_FALSE(AllReduceTuner::recalibrates(later, 53e-3, slow_link));
  EXPECT_FALSE(AllReduceTuner::recalibrates(later, 0.1e-3, slow_link));
  EXPECT_TRUE(AllReduceTuner::recalibrates(later, 0.1e-3, slow_link));
  // And the other way: 0.1 ms calibrated in 20 ms, now 52 ms a call.
  AllReduceTuner::Choice fast_link;
  fast_link.seconds = 0.1e-3;
  fast_link.calibration_s = 20e-3;
  AllReduceTuner::Drift slowed;
  EXPECT_FALSE(AllReduceTuner::recalibrates(slowed, 0.12e-3, fast_link));
  EXPECT_FALSE(AllReduceTuner::recalibrates(slowed, 52e-3, fast_link));
  EXPECT_TRUE(AllReduceTuner::recalibrates(slowed, 52e-3, fast_link));
}

}  // namespace
}  // namespace dtrain::comm
