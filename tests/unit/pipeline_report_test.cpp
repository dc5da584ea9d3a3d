// Pipeline rank reports cross the wire as JSON by key: every field round-trips, and a
// missing key is an error that names it.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "dtrain/parallel/pipeline/report.h"

namespace dtrain::parallel::pipeline {
namespace {

RankReport sample() {
  RankReport r;
  r.rank = 3;
  r.blocks = {"fc5", "head"};
  r.times = {1.5, 2.5, 0.25, 0.125, 3.5, 0.0625, 0.03125, 9.75, 42};
  r.links = {{1, 3, "forward", 1000, 4000, 7, 0.5}, {2, 3, "backward", 10, 40, 1, 0.25}};
  r.peak_rss_bytes = 123456789;
  return r;
}

TEST(PipelineReportTest, EveryFieldRoundTripsThroughText) {
  const RankReport r = sample();
  const RankReport back = nlohmann::json::parse(nlohmann::json(r).dump()).get<RankReport>();
  EXPECT_EQ(back.rank, r.rank);
  EXPECT_EQ(back.blocks, r.blocks);
  EXPECT_EQ(back.peak_rss_bytes, r.peak_rss_bytes);
  EXPECT_EQ(back.times.forward_s, 1.5);
  EXPECT_EQ(back.times.backward_s, 2.5);
  EXPECT_EQ(back.times.encode_s, 0.25);
  EXPECT_EQ(back.times.decode_s, 0.125);
  EXPECT_EQ(back.times.recv_wait_s, 3.5);
  EXPECT_EQ(back.times.send_wait_s, 0.0625);
  EXPECT_EQ(back.times.wire_check_s, 0.03125);
  EXPECT_EQ(back.times.step_s, 9.75);
  EXPECT_EQ(back.times.steps, 42);
  ASSERT_EQ(back.links.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(back.links[i].src, r.links[i].src);
    EXPECT_EQ(back.links[i].dst, r.links[i].dst);
    EXPECT_EQ(back.links[i].direction, r.links[i].direction);
    EXPECT_EQ(back.links[i].bytes, r.links[i].bytes);
    EXPECT_EQ(back.links[i].fp32_bytes, r.links[i].fp32_bytes);
    EXPECT_EQ(back.links[i].messages, r.links[i].messages);
    EXPECT_EQ(back.links[i].recv_time_s, r.links[i].recv_time_s);
  }
}

TEST(PipelineReportTest, FieldsAreKeyedNotPositional) {
  nlohmann::json j = sample();
  EXPECT_EQ(j.at("times").at("recv_wait_s"), 3.5);
  j["times"].erase("send_wait_s");
  try {
    j.get<RankReport>();
    FAIL() << "no exception";
  } catch (const nlohmann::json::exception& e) {
    EXPECT_NE(std::string(e.what()).find("send_wait_s"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtrain::parallel::pipeline
