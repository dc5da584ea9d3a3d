// --compress-outer auto's choice (parallel/diloco_auto.h), from numbers given here.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "dtrain/parallel/diloco_auto.h"

namespace dtrain::parallel {
namespace {

const std::vector<compress::CodecSpec> kCandidates = {
    compress::parse_codec("none"), compress::parse_codec("fp16"),
    compress::parse_codec("sortquant:8"), compress::parse_codec("rot:tile:2")};

// The cnn (421,642 values) over 2 replicas, H = 50, a step of 8.5 ms.
OuterSetting cnn(double mbit_per_s, double latency_ms) {
  OuterSetting s;
  s.step_s = 0.0085;
  s.rate_bytes_per_s = mbit_per_s * 1e6 / 8;
  s.latency_s = latency_ms / 1e3;
  s.values = 421642;
  s.replicas = 2;
  return s;
}

TEST(OuterCodecChoiceTest, AFastLinkKeepsTheExchangeExact) {
  const OuterChoice c = choose_outer_codec(kCandidates, cnn(10000, 0.05));
  EXPECT_EQ(c.chosen, 0u);
  // An exact mean of 2 sends the 1.69 MB once each way, in one message: 1.35 ms at 10 Gbit/s
  // and one one-way delay. Among 3, 4/3 of it each way, in two.
  EXPECT_NEAR(c.exchange_s[0], 4.0 * 421642 * 8 / 10e9 + 0.05e-3, 1e-9);
  OuterSetting three = cnn(10000, 0.05);
  three.replicas = 3;
  EXPECT_NEAR(choose_outer_codec(kCandidates, three).exchange_s[0],
              4.0 / 3 * 4.0 * 421642 * 8 / 10e9 + 2 * 0.05e-3, 1e-9);
  EXPECT_NEAR(c.budget_s, 0.05 * 50 * 0.0085, 1e-12);
}

TEST(OuterCodecChoiceTest, ASlowLinkTakesTheLeastExposedWhenNoneFitsTheBudget) {
  const OuterChoice c = choose_outer_codec(kCandidates, cnn(20, 5));
  // 0.67 s exact against a 21 ms budget: no candidate fits; the 2-bit one waits least.
  EXPECT_EQ(c.chosen, 3u);
  for (size_t i = 1; i < kCandidates.size(); ++i)
    EXPECT_LT(c.exposed_s[i], c.exposed_s[i - 1]) << i;
  // The least lossy candidate that fits wins where one does: 100 Mbit/s and a 4x longer round.
  OuterSetting longer = cnn(100, 0.5);
  longer.sync_every = 200;
  EXPECT_EQ(choose_outer_codec(kCandidates, longer).chosen, 1u);  // fp16: 69 of 85 ms
}

TEST(OuterCodecChoiceTest, StreamingHidesALessLossyCodecBehindTheDelay) {
  OuterSetting s = cnn(20, 5);
  s.fragments = 5;
  s.sync_delay = 10;  // 85 ms of steps beside each exchange of a fifth of the model
  s.values = 421642 / 5;
  const OuterChoice c = choose_outer_codec(kCandidates, s);
  EXPECT_EQ(c.chosen, 1u) << "fp16's 77 ms hide behind 85 ms; exact's 145 ms do not";
  EXPECT_EQ(c.exposed_s[1], 0);
  EXPECT_GT(c.exposed_s[0], c.budget_s);
}

// Streaming exchanges every fragment at each epoch's last step, where no step hides it: the
// bench's 20 Mbit/s link (18.6 Mbit/s read, 5.2 ms), steps of 50 ms, H = 20, F = 5, tau = 4,
// 200 steps an epoch. Each exchange hides behind its 4 steps, but the epoch's end pays 5
// whole exchanges, spread over the epoch's 50: exact's 155 ms each add 15.5 ms to each, over
// the 10 ms budget; fp16's 83 ms add 8.3 ms and fit.
TEST(OuterCodecChoiceTest, StreamingCountsTheEpochsLastExchangeOfEveryFragment) {
  OuterSetting s = cnn(18.6, 5.2);
  s.step_s = 0.05;
  s.sync_every = 20;
  s.fragments = 5;
  s.sync_delay = 4;
  s.values = 421642 / 5;
  const OuterChoice unknown = choose_outer_codec(kCandidates, s);
  EXPECT_EQ(unknown.chosen, 0u) << "without the epoch's length every exchange hides";
  s.epoch_steps = 200;
  const OuterChoice c = choose_outer_codec(kCandidates, s);
  EXPECT_NEAR(c.exposed_s[0], c.exchange_s[0] * 20 / 200, 1e-12);
  EXPECT_GT(c.exposed_s[0], c.budget_s);
  EXPECT_EQ(c.chosen, 1u);
  // Blocking DiLoCo (F = 1, tau = 0) has no such flush: its last step is its round's end.
  OuterSetting blocking = cnn(18.6, 5.2);
  blocking.epoch_steps = 200;
  const OuterChoice b = choose_outer_codec(kCandidates, blocking);
  EXPECT_NEAR(b.exposed_s[0], b.exchange_s[0], 1e-12);
}

TEST(OuterCodecChoiceTest, NearTiesGoToTheLessLossyAndBadInputsAreErrors) {
  // Latency-bound: every candidate waits about the same 200 ms.
  OuterSetting s = cnn(10000, 200);
  EXPECT_EQ(choose_outer_codec(kCandidates, s).chosen, 0u);
  // A loaded machine's loopback (CI, 2026-11-26): 23 Gbit/s, 3.9 ms one way, steps of 30 ms;
  // H = 2. Every candidate waits more than the 3 ms budget, by latency; fp16 would save
  // 0.3 ms of the exact exchange's 4.5 ms, less than the budget: the exchange stays exact.
  OuterSetting loaded = cnn(23032, 3.9);
  loaded.step_s = 0.030;
  loaded.sync_every = 2;
  const OuterChoice l = choose_outer_codec(kCandidates, loaded);
  EXPECT_GT(l.exposed_s[1], l.budget_s);
  EXPECT_LT(l.exposed_s[1], l.exposed_s[0]);
  EXPECT_EQ(l.chosen, 0u);
  s.rate_bytes_per_s = 0;
  EXPECT_THROW(choose_outer_codec(kCandidates, s), std::invalid_argument);
  EXPECT_THROW(choose_outer_codec({}, cnn(20, 5)), std::invalid_argument);
}

// The second choice's rate, from the exchanges themselves (measured on a 50 Mbit/s link with
// 100 ms one way: the probe read 48.7 Mbit/s, rot:tile:4's 2-replica exchanges of the cnn
// took about 0.3 s each, slow start after every idle window).
TEST(OuterCodecChoiceTest, TheExchangesRateTakesTheirDelaysOutAndNeverExceedsTheProbes) {
  OuterSetting s = cnn(48.7, 100);
  // 200,000 bytes in 0.3 s, of which one 100 ms delay: 1 MB/s on the wire.
  EXPECT_NEAR(rate_from_exchanges(s, 0.3, 200000), 1e6, 1e-6);
  // Among 3 replicas an exchange waits two delays: 200,000 bytes in 0.1 s.
  s.replicas = 3;
  EXPECT_NEAR(rate_from_exchanges(s, 0.3, 200000), 2e6, 1e-6);
  s.replicas = 2;
  // Faster than the probe read, or all delay, or nothing sent: the probe's rate stays.
  EXPECT_EQ(rate_from_exchanges(s, 0.1001, 200000), s.rate_bytes_per_s);
  EXPECT_EQ(rate_from_exchanges(s, 0.05, 200000), s.rate_bytes_per_s);
  EXPECT_EQ(rate_from_exchanges(s, 0.3, 0), s.rate_bytes_per_s);
  // At that rate the exact exchange (1.7 MB) would take 1.8 s, the 2-bit one 0.2 s.
  OuterSetting measured = s;
  measured.rate_bytes_per_s = rate_from_exchanges(s, 0.3, 200000);
  const OuterChoice c = choose_outer_codec(kCandidates, measured);
  EXPECT_NEAR(c.exchange_s[0], 0.1 + 4.0 * 421642 / 1e6, 1e-9);
  EXPECT_EQ(c.chosen, 3u);
}

// After a change from measured exchanges only the codec in force or a lossier one is
// eligible: a setting where fp16 hides still keeps the 8-bit codec from there on, and the
// exposures listed are the eligible ones'.
TEST(OuterCodecChoiceTest, FromAFloorOnlyTheCodecInForceOrALossierOneIsChosen) {
  OuterSetting s = cnn(1000, 1);
  s.sync_every = 500;
  ASSERT_EQ(choose_outer_codec(kCandidates, s).chosen, 0u);
  const OuterChoice from_8bit = choose_outer_codec(kCandidates, s, 2);
  EXPECT_EQ(from_8bit.chosen, 2u);
  EXPECT_EQ(choose_outer_codec(kCandidates, s, 3).chosen, 3u);
  const std::string line = describe(from_8bit, kCandidates, s, 2);
  EXPECT_EQ(line.find("waits per exchange: none"), std::string::npos) << line;
  EXPECT_NE(line.find("waits per exchange: sortquant"), std::string::npos) << line;
  EXPECT_THROW(choose_outer_codec(kCandidates, s, kCandidates.size()), std::invalid_argument);
}

// The steps' own time: spans from a step's start to its end only, the first step (and the
// first after a pause) untimed, the median of the rest (an outlier does not move it).
TEST(OuterCodecChoiceTest, InnerStepTimesTakeTheMedianOfTheStepsOwnSpans) {
  using namespace std::chrono_literals;
  InnerStepTimes t;
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.median_s(), 0);
  t.step_ended();  // the first step: nothing started it
  EXPECT_TRUE(t.empty());
  for (const auto span : {20ms, 20ms, 400ms}) {
    t.step_started();
    std::this_thread::sleep_for(span);
    t.step_ended();
    std::this_thread::sleep_for(50ms);  // DiLoCo's own time, not the step's
  }
  EXPECT_GE(t.median_s(), 0.02);
  EXPECT_LT(t.median_s(), 0.4);
  t.step_started();
  t.pause();  // an epoch's end: the span to the next step's end is not a step's
  std::this_thread::sleep_for(450ms);
  t.step_ended();
  EXPECT_LT(t.median_s(), 0.4);
  t.clear();
  EXPECT_TRUE(t.empty());
}

// Streaming's advice (the 100 ms link: a fragment's exchange 127 ms, steps of 20 ms): a delay
// of 4 steps leaves it exposed, 7 covers it; none where the delay hides it, where the run
// blocks by choice or the delay is already H, and never beyond H.
TEST(OuterCodecChoiceTest, TheDelayThatHidesAStreamingExchangeCoversItsMeanTime) {
  EXPECT_EQ(delay_to_hide(119 * 0.127, 119, 0.020, 4, 20), std::optional<int64_t>(7));
  EXPECT_EQ(delay_to_hide(119 * 0.085, 119, 0.020, 4, 20), std::nullopt);  // within a tenth
  EXPECT_EQ(delay_to_hide(119 * 0.127, 119, 0.020, 8, 20), std::nullopt);
  EXPECT_EQ(delay_to_hide(119 * 0.127, 119, 0.020, 0, 20), std::nullopt);
  EXPECT_EQ(delay_to_hide(119 * 0.127, 119, 0.020, 20, 20), std::nullopt);
  EXPECT_EQ(delay_to_hide(10 * 1.0, 10, 0.020, 4, 20), std::optional<int64_t>(20));
  EXPECT_EQ(delay_to_hide(0, 0, 0.020, 4, 20), std::nullopt);
  EXPECT_EQ(delay_to_hide(1, 1, 0, 4, 20), std::nullopt);
}

}  // namespace
}  // namespace dtrain::parallel
