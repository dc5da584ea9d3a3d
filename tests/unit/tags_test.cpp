// The tag registry: fields pack in order, spaces never overlap, overflow is an error.
#include <gtest/gtest.h>

#include <set>

#include "dtrain/comm/tags.h"

namespace dtrain::comm {
namespace {

TEST(TagsTest, FieldsPackInOrderBelowTheSpace) {
  const TagLayout layout(TagSpace::kPipeline, {{"kind", 3}, {"stage", 10}, {"micro-batch", 11}});
  EXPECT_EQ(layout.make({0, 0, 0}), 2 << 24);
  EXPECT_EQ(layout.make({5, 3, 7}), (2 << 24) | (5 << 21) | (3 << 11) | 7);
  EXPECT_EQ(layout.limit(1), 1024);
  EXPECT_EQ(layout.limit(2), 2048);
  EXPECT_GT(layout.make({7, 1023, 2047}), 0);
}

TEST(TagsTest, OverflowNamesTheField) {
  const TagLayout layout(TagSpace::kPipeline, {{"kind", 3}, {"stage", 10}, {"micro-batch", 11}});
  try {
    layout.make({1, 1024, 0});
    FAIL() << "no exception";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("'stage' = 1024 is outside 0..1023"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(layout.make({1, 0, -1}), std::out_of_range);
  EXPECT_THROW(layout.make({1, 0}), std::invalid_argument);
  EXPECT_THROW(TagLayout(TagSpace::kDdp, {{"a", 20}, {"b", 5}}), std::invalid_argument);
}

TEST(TagsTest, SpacesAndChannelsNeverCollide) {
  std::set<int> seen;
  for (auto c : {CollectiveChannel::kAllReduce, CollectiveChannel::kBroadcast,
                 CollectiveChannel::kScatterGather, CollectiveChannel::kSyncBatchNorm})
    EXPECT_TRUE(seen.insert(collective_tag(c)).second);
  // An algorithm's second phase (tag + 1: all_reduce's exchange) meets no other collective.
  for (auto c : {CollectiveChannel::kAllReduce, CollectiveChannel::kBroadcast,
                 CollectiveChannel::kScatterGather, CollectiveChannel::kSyncBatchNorm})
    EXPECT_EQ(seen.count(collective_tag(c) + 1), 0u) << static_cast<int>(c);
  EXPECT_TRUE(seen.insert(report_tag()).second);
  EXPECT_TRUE(seen.insert(trace_tag()).second);
  const TagLayout ddp(TagSpace::kDdp, {{"phase", 1}, {"bucket", 23}});
  const TagLayout pipeline(TagSpace::kPipeline, {{"kind", 3}, {"stage", 10}, {"mb", 11}});
  // The largest tag of one space stays below the smallest of the next.
  EXPECT_LT(*seen.rbegin() & ((1 << 24) - 1), 1 << 24);
  EXPECT_LT(pipeline.make({7, 1023, 2047}), ddp.make({0, 0}));
  EXPECT_LT(ddp.make({1, (1 << 23) - 1}), report_tag());
}

}  // namespace
}  // namespace dtrain::comm
