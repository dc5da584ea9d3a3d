// --compress auto's runoff: which assignment is run off, in which order the steps
// alternate, and who wins, from given step times (no clocks).
#include <gtest/gtest.h>

#include "dtrain/parallel/auto_runoff.h"

namespace dtrain::parallel {
namespace {

using compress::parse_codec;

const std::vector<compress::CodecSpec> kCandidates = {parse_codec("none"), parse_codec("fp16"),
                                                      parse_codec("sortquant:12"),
                                                      parse_codec("sortquant:8")};

LinkChoice link(size_t chosen, std::vector<double> predicted) {
  LinkChoice c;
  c.src = 0;
  c.dst = 1;
  c.rate_bytes_per_s = 12.5e6;
  c.chosen = chosen;
  c.predicted_step_s = std::move(predicted);
  return c;
}

// Measurements behind `links` choices: every candidate's bytes take `wire_s` on a link of
// 1 byte/s.
AutoInput measured_links(size_t links, double wire_s) {
  AutoInput in;
  in.compute_s = {0.1, 0.1};
  for (size_t i = 0; i < links; ++i) {
    LinkMeasurement l;
    l.rate_bytes_per_s = 1;
    for (const auto& c : kCandidates)
      l.costs.push_back({c, wire_s, 0, 0});
    in.links.push_back(l);
  }
  return in;
}

TEST(AutoRunoffTest, OnlyCandidatesPredictedWithinTheWindowAreRunOff) {
  // sortquant:12 chosen at 0.826 s (a preference-window pick); sortquant:8 at 0.792 is the
  // closest other; none and fp16 are far.
  const auto plan = plan_runoff(measured_links(1, 0.5), {link(2, {3.1, 1.6, 0.826, 0.792})}, 0.25);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->a, (Assignment{2}));
  EXPECT_EQ(plan->b, (Assignment{3}));
  // Nothing within 25 %: no runoff.
  EXPECT_FALSE(plan_runoff(measured_links(1, 0.5), {link(0, {1.0, 1.3, 1.4, 1.5})}, 0.25));
  // A window of 0 trusts the prediction.
  EXPECT_FALSE(plan_runoff(measured_links(1, 0.5), {link(2, {3.1, 1.6, 0.826, 0.792})}, 0));
  // A link whose wire time is under 10 % of the step (loopback) is not run off.
  EXPECT_FALSE(plan_runoff(measured_links(1, 0.07), {link(0, {0.8, 0.79, 0.9, 0.85})}, 0.25));
  // Two links: one with a close rival, one without, which keeps its choice on both sides.
  const auto two = plan_runoff(
      measured_links(2, 0.5), {link(0, {1.0, 1.1, 1.4, 1.5}), link(3, {2.0, 1.9, 1.8, 1.0})}, 0.25);
  ASSERT_TRUE(two);
  EXPECT_EQ(two->a, (Assignment{0, 3}));
  EXPECT_EQ(two->b, (Assignment{1, 3}));
  // Two links close to each other's choice (mobilenetv2 at 100 Mbit/s): the closest rival
  // (sortquant:8 on the first link) sets the way, more compression; the second link has
  // nothing more compressive and keeps its choice, instead of trading places.
  const auto mixed = plan_runoff(
      measured_links(2, 0.5),
      {link(2, {1.1975, 0.7442, 0.7185, 0.6850}), link(3, {1.1930, 0.7391, 0.7212, 0.6850})}, 0.25);
  ASSERT_TRUE(mixed);
  EXPECT_EQ(mixed->a, (Assignment{2, 3}));
  EXPECT_EQ(mixed->b, (Assignment{3, 3}));
}

TEST(AutoRunoffTest, StepsAlternateInAbbaOrderAndEndAfterTheWarmUpAndThePairs) {
  Runoff r({{2}, {3}}, 3);
  std::string order;
  for (int step = 0; step < 8; ++step) {
    EXPECT_FALSE(r.decided());
    order += r.next() == Assignment{3} ? 'B' : 'A';
    r.record(1.0, 64);
  }
  EXPECT_EQ(order, "ABBAABBA");
  EXPECT_TRUE(r.decided());
  EXPECT_EQ(r.summary().pairs, 3);  // the first pair is warm-up
}

TEST(AutoRunoffTest, ShortStepsGetMorePairsUpToAFewSecondsOfSteps) {
  EXPECT_EQ(runoff_pairs_for(0.75), 3);    // mobilenetv2 at 100 Mbit/s: the minimum
  EXPECT_EQ(runoff_pairs_for(0.1), 5);     // 1 s of pairs
  EXPECT_EQ(runoff_pairs_for(0.025), 16);  // cnn at 1 Gbit/s: the maximum
  EXPECT_EQ(runoff_pairs_for(0), 16);
}

metrics::AlternatingCost::Summary measured(double a_s, double b_s, int64_t pairs = 3,
                                           double ci95 = 0.01) {
  metrics::AlternatingCost::Summary s;
  s.pairs = pairs;
  s.off_s = a_s;
  s.on_s = b_s;
  s.cost = (b_s - a_s) / a_s;
  s.cost_ci95 = ci95;
  return s;
}

TEST(AutoRunoffTest, TheFasterSideWinsAndNearTiesGoToTheLessLossy) {
  const RunoffPlan lossier_b{{2}, {3}}, exacter_b{{3}, {2}};
  EXPECT_TRUE(runoff_prefers_b(lossier_b, measured(1.0, 0.85)));   // 15 % faster
  EXPECT_FALSE(runoff_prefers_b(lossier_b, measured(1.0, 0.97)));  // inside the 5 % margin
  EXPECT_FALSE(runoff_prefers_b(lossier_b, measured(1.0, 1.10)));  // slower
  // 15 % faster on average, but the pairs scatter more than that: not told apart.
  EXPECT_FALSE(runoff_prefers_b(lossier_b, measured(1.0, 0.85, 3, 0.2)));
  EXPECT_TRUE(runoff_prefers_b(exacter_b, measured(1.0, 1.04)));     // a tie: go exacter
  EXPECT_FALSE(runoff_prefers_b(exacter_b, measured(1.0, 1.08)));    // clearly slower
  EXPECT_FALSE(runoff_prefers_b(exacter_b, measured(1.0, 0.9, 0)));  // nothing counted
}

TEST(AutoRunoffTest, SettlingRecordsTheMeasurementInTheChoiceAndItsRow) {
  std::vector<LinkChoice> choices{link(2, {3.1, 1.6, 0.826, 0.792})};
  const RunoffPlan plan{{2}, {3}};
  const std::string line = settle_runoff(plan, measured(1.0, 0.85), true, kCandidates, choices);
  const std::string sq12 = to_string(kCandidates[2]), sq8 = to_string(kCandidates[3]);
  EXPECT_EQ(line,
            "runoff over 3 pairs: " + sq12 + " 1.0000 s, " + sq8 + " 0.8500 s per step: " + sq8);
  EXPECT_EQ(choices[0].chosen, 3u);
  const metrics::Row row = to_row(choices[0], kCandidates);
  EXPECT_EQ(row.at("codec"), sq8);
  EXPECT_EQ(row.at("runoff_pairs"), 3);
  EXPECT_DOUBLE_EQ(row.at("measured_step_s_by_codec").at(sq12).get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(row.at("measured_step_s_by_codec").at(sq8).get<double>(), 0.85);
  // A link on the same codec on both sides gets the outcome but no measurement: its two
  // times would land on one codec's name.
  std::vector<LinkChoice> two{link(2, {3.1, 1.6, 0.826, 0.792}), link(3, {3.1, 1.6, 0.83, 0.79})};
  settle_runoff({{2, 3}, {3, 3}}, measured(1.0, 0.85), true, kCandidates, two);
  EXPECT_EQ(two[0].chosen, 3u);
  EXPECT_TRUE(two[0].runoff);
  EXPECT_EQ(two[1].chosen, 3u);
  EXPECT_FALSE(two[1].runoff);
  EXPECT_FALSE(to_row(two[1], kCandidates).contains("measured_step_s_by_codec"));
  // Without a runoff the row has no measurement.
  EXPECT_FALSE(to_row(link(0, {1, 2, 3, 4}), kCandidates).contains("runoff_pairs"));
}

}  // namespace
}  // namespace dtrain::parallel
