// --compress auto's decision from given measurements (no timing: numbers in, choice out).
#include <gtest/gtest.h>

#include "dtrain/parallel/auto_codec.h"

namespace dtrain::parallel {
namespace {

using compress::parse_codec;

// A U-shape of 2 ranks: links 0->1 and 1->0 carry `fp32_bytes` per step uncompressed, 8
// messages; candidates none, fp16, sortquant:8 with their real sizes and coding costs.
AutoInput ushape(double rate_bytes_per_s, double fp32_bytes, double compute_s = 0.02) {
  AutoInput in;
  in.compute_s = {compute_s, compute_s};
  in.micro_batches = 4;
  for (const auto& [src, dst] : {std::pair{0, 1}, std::pair{1, 0}}) {
    LinkMeasurement l;
    l.src = src;
    l.dst = dst;
    l.rate_bytes_per_s = rate_bytes_per_s;
    l.latency_s = 50e-6;
    l.messages = 8;
    // Coding speeds in input bytes per second, as bench codec measures them here.
    l.costs = {{parse_codec("none"), fp32_bytes, 0, 0},
               {parse_codec("fp16"), fp32_bytes / 2, fp32_bytes / 3e9, fp32_bytes / 3e9},
               {parse_codec("sortquant:8"), fp32_bytes / 4, fp32_bytes / 0.5e9, fp32_bytes / 3e9}};
    in.links.push_back(l);
  }
  return in;
}

TEST(AutoCodecTest, FilteringByBitsKeepsOrderAndRefusesAnEmptySet) {
  AutoCompress options{default_auto_candidates(), 8};
  ASSERT_EQ(eligible_candidates(options).size(), 4u);
  options.min_bits = 2;
  ASSERT_EQ(eligible_candidates(options).size(), 6u);
  options.min_bits = 4;
  EXPECT_EQ(to_string(eligible_candidates(options).back()), "rot:256:tile:4");
  options.min_bits = 12;
  const auto twelve = eligible_candidates(options);
  ASSERT_EQ(twelve.size(), 3u);
  EXPECT_EQ(to_string(twelve.back()), "sortquant:9:3");
  options.candidates = {parse_codec("sortquant:4"), parse_codec("kmeans:4")};
  options.min_bits = 8;
  EXPECT_THROW(eligible_candidates(options), std::invalid_argument);
}

TEST(AutoCodecTest, PredictionFollowsThePipelineFormula) {
  AutoInput in;
  in.compute_s = {0.4, 0.8};  // per step; M = 4: 0.1 and 0.2 per micro-batch
  in.micro_batches = 4;
  LinkMeasurement l{0, 1, 1e6, 0.0, 4, {{parse_codec("none"), 4e5, 0, 0}}};  // 0.1 s per mb
  in.links = {l};
  // sum 0.1 + 0.2 + 0.1, then 3 more micro-batches at the bottleneck 0.2.
  EXPECT_NEAR(predict_step_s(in, {0}), 0.4 + 3 * 0.2, 1e-12);
}

TEST(AutoCodecTest, AFastLinkKeepsNone) {
  // Loopback-like: 5 GB/s; 1 MB per step per direction.
  for (const auto& c : choose_codecs(ushape(5e9, 1e6))) {
    EXPECT_EQ(c.chosen, 0u) << describe(c, ushape(5e9, 1e6).links[0].costs);
  }
}

TEST(AutoCodecTest, ASlowLinkTakesTheSmallestPacketsWorthTheirCost) {
  // 100 Mbit/s: the wire dominates, sortquant:8 wins on both directions.
  const auto in = ushape(12.5e6, 4e6);
  const auto choices = choose_codecs(in);
  ASSERT_EQ(choices.size(), 2u);
  for (const auto& c : choices) {
    EXPECT_EQ(c.chosen, 2u) << describe(c, in.links[0].costs);
    EXPECT_LT(c.predicted_step_s[2], c.predicted_step_s[1]);
    EXPECT_LT(c.predicted_step_s[1], c.predicted_step_s[0]);
  }
}

TEST(AutoCodecTest, EachDirectionIsChosenOnItsOwnRate) {
  auto in = ushape(12.5e6, 4e6);
  in.links[1].rate_bytes_per_s = 5e9;  // a fast downlink back to the client
  const auto choices = choose_codecs(in);
  EXPECT_EQ(choices[0].chosen, 2u);
  EXPECT_EQ(choices[1].chosen, 0u);
}

TEST(AutoCodecTest, ARateChangeChangesTheChoice) {
  EXPECT_EQ(choose_codecs(ushape(125e6, 4e6))[0].chosen, 1u);  // 1 Gbit/s: fp16
  EXPECT_EQ(choose_codecs(ushape(2.5e6, 4e6))[0].chosen, 2u);  // 20 Mbit/s: sortquant:8
}

TEST(AutoCodecTest, ManyLinksAreChosenOneAtATime) {
  AutoInput in = ushape(12.5e6, 4e6);
  in.compute_s.assign(8, 0.02);
  const auto link = in.links[0];
  in.links.clear();
  for (int r = 0; r < 8; ++r) {  // 8 links x 3 candidates: 6561 combinations
    LinkMeasurement l = link;
    l.src = r;
    l.dst = (r + 1) % 8;
    in.links.push_back(l);
  }
  for (const auto& c : choose_codecs(in))
    EXPECT_EQ(c.chosen, 2u);
}

TEST(AutoCodecTest, LinksWithoutRatesOrCandidatesAreErrors) {
  auto in = ushape(12.5e6, 4e6);
  in.links[0].rate_bytes_per_s = 0;
  EXPECT_THROW(choose_codecs(in), std::invalid_argument);
  in = ushape(12.5e6, 4e6);
  in.links[1].costs.clear();
  EXPECT_THROW(choose_codecs(in), std::invalid_argument);
}

}  // namespace
}  // namespace dtrain::parallel
