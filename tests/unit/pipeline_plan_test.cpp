// Pipeline schedules and partitions: pure functions, checked against their definitions.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "dtrain/parallel/pipeline/partition.h"
#include "dtrain/parallel/pipeline/schedule.h"

namespace dtrain::parallel::pipeline {
namespace {

std::vector<int> linear_ranks(int s) {
  std::vector<int> r(static_cast<size_t>(s));
  std::iota(r.begin(), r.end(), 0);
  return r;
}

std::vector<int> ushape_ranks(int s) {  // client, servers 1..s-1, client
  std::vector<int> r{0};
  for (int i = 1; i < s; ++i)
    r.push_back(i);
  r.push_back(0);
  return r;
}

// Independent of verify(): each op once, and per rank the micro-batches of a stage run in
// order with a micro-batch's forward before its backward.
void expect_complete_and_ordered(const Schedule& s, bool with_backward) {
  std::vector<int> count(static_cast<size_t>(s.stages() * s.micro_batches * 2));
  for (int r = 0; r < s.ranks; ++r) {
    std::vector<int> next_f(static_cast<size_t>(s.stages())), next_b(next_f.size());
    for (const Op& op : s.by_rank[static_cast<size_t>(r)]) {
      ASSERT_EQ(s.stage_rank[static_cast<size_t>(op.stage)], r);
      const auto v = static_cast<size_t>(op.stage);
      if (op.kind == OpKind::kForward) {
        EXPECT_EQ(op.micro_batch, next_f[v]++);
      } else {
        EXPECT_EQ(op.micro_batch, next_b[v]++);
        EXPECT_LT(op.micro_batch, next_f[v]) << "backward before its forward";
      }
      ++count[static_cast<size_t>(((op.kind == OpKind::kBackward) * s.stages() + op.stage) *
                                      s.micro_batches +
                                  op.micro_batch)];
    }
  }
  for (size_t i = 0; i < count.size(); ++i) {
    const bool is_backward = i >= count.size() / 2;
    EXPECT_EQ(count[i], is_backward && !with_backward ? 0 : 1) << "op index " << i;
  }
}

TEST(PipelineSchedule, EveryOpOnceInValidOrderForManyShapes) {
  for (const std::string kind : {"gpipe", "1f1b"}) {
    for (int s = 1; s <= 8; ++s) {
      for (int m : {1, 2, 3, 7, 32, 256}) {
        for (bool ushape : {false, true}) {
          if (ushape && s < 2) continue;
          const auto ranks = ushape ? ushape_ranks(s) : linear_ranks(s);
          const Schedule sched = make_schedule(kind, ranks, s, m);
          SCOPED_TRACE(kind + " S=" + std::to_string(s) + " M=" + std::to_string(m) +
                       (ushape ? " ushape" : " linear"));
          expect_complete_and_ordered(sched, true);
          EXPECT_NO_THROW(verify(sched));
          const Schedule fwd = make_forward_schedule(ranks, s, m);
          expect_complete_and_ordered(fwd, false);
          EXPECT_NO_THROW(verify(fwd));
        }
      }
    }
  }
}

TEST(PipelineSchedule, GPipeRunsAllForwardsBeforeAnyBackward) {
  const Schedule s = make_schedule("gpipe", ushape_ranks(3), 3, 6);
  for (const auto& ops : s.by_rank) {
    const auto first_b = std::find_if(ops.begin(), ops.end(),
                                      [](const Op& o) { return o.kind == OpKind::kBackward; });
    EXPECT_TRUE(
        std::none_of(first_b, ops.end(), [](const Op& o) { return o.kind == OpKind::kForward; }));
  }
  EXPECT_EQ(peak_in_flight(s, 0), 6);
}

TEST(PipelineSchedule, OneFOneBBoundsActivationsInFlight) {
  for (int s = 1; s <= 8; ++s) {
    for (int m : {1, 4, 16, 64}) {
      const Schedule lin = make_schedule("1f1b", linear_ranks(s), s, m);
      for (int v = 0; v < s; ++v)
        EXPECT_EQ(peak_in_flight(lin, v), std::min(m, s - v)) << "S=" << s << " M=" << m;
      if (s < 2) continue;
      const Schedule u = make_schedule("1f1b", ushape_ranks(s), s, m);
      for (int v = 0; v < u.stages(); ++v)
        EXPECT_LE(peak_in_flight(u, v), std::min(m, s)) << "ushape S=" << s << " stage " << v;
    }
  }
}

TEST(PipelineSchedule, OneFOneBSteadyStateAlternates) {
  // The first stage of a 4-stage chain: 4 forwards (warm-up), then B/F pairs, then drain.
  const Schedule s = make_schedule("1f1b", linear_ranks(4), 4, 8);
  std::string pattern;
  for (const Op& op : s.by_rank[0])
    pattern += op.kind == OpKind::kForward ? 'F' : 'B';
  EXPECT_EQ(pattern, "FFFFBFBFBFBFBBBB");
}

TEST(PipelineSchedule, VerifyRejectsBrokenSchedules) {
  Schedule s = make_schedule("gpipe", linear_ranks(2), 2, 2);
  Schedule missing = s;
  missing.by_rank[1].pop_back();
  EXPECT_THROW(verify(missing), std::logic_error);
  Schedule swapped = s;  // rank 0 waits for a backward before it sends the forward it needs
  std::reverse(swapped.by_rank[0].begin(), swapped.by_rank[0].end());
  EXPECT_THROW(verify(swapped), std::logic_error);
  Schedule wrong_rank = s;
  std::swap(wrong_rank.by_rank[0], wrong_rank.by_rank[1]);
  EXPECT_THROW(verify(wrong_rank), std::logic_error);
  EXPECT_THROW(make_schedule("gpipe", {0, 2}, 3, 2), std::invalid_argument);
  EXPECT_THROW(make_schedule("gpipe", {0, 1}, 2, 0), std::invalid_argument);
  EXPECT_THROW(parse_schedule("pipedream"), std::invalid_argument);
}

TEST(PipelineSchedule, IdealBubble) {
  EXPECT_DOUBLE_EQ(ideal_bubble(1, 8), 0.0);
  EXPECT_DOUBLE_EQ(ideal_bubble(4, 4), 3.0 / 7.0);
}

TEST(PipelinePartition, BalanceMinimizesTheHeaviestStage) {
  // Brute force over all cut positions as the reference.
  const std::vector<double> w{5, 1, 1, 1, 7, 2, 2, 3, 1};
  for (int parts = 1; parts <= 5; ++parts) {
    const auto counts = balance_by_weight(w, parts);
    ASSERT_EQ(static_cast<int>(counts.size()), parts);
    double heaviest = 0;
    size_t i = 0;
    for (const int64_t c : counts) {
      ASSERT_GE(c, 1);
      heaviest =
          std::max(heaviest,
                   std::accumulate(w.begin() + static_cast<long>(i),
                                   w.begin() + static_cast<long>(i + static_cast<size_t>(c)), 0.0));
      i += static_cast<size_t>(c);
    }
    EXPECT_EQ(i, w.size());
    double best = 1e18;
    const int n = static_cast<int>(w.size());
    for (int mask = 0; mask < (1 << (n - 1)); ++mask) {
      if (__builtin_popcount(static_cast<unsigned>(mask)) != parts - 1) continue;
      double run = 0, worst = 0;
      for (int b = 0; b < n; ++b) {
        run += w[static_cast<size_t>(b)];
        if (b == n - 1 || (mask >> b & 1)) {
          worst = std::max(worst, run);
          run = 0;
        }
      }
      best = std::min(best, worst);
    }
    EXPECT_DOUBLE_EQ(heaviest, best) << parts << " parts";
  }
  EXPECT_THROW(balance_by_weight({1, 2}, 3), std::invalid_argument);
}

TEST(PipelinePartition, LinearAndUShapeLayouts) {
  const Partition lin = make_partition(Placement::kLinear, 3, 12, {3, 5, 4}, {});
  ASSERT_EQ(lin.stages.size(), 3u);
  EXPECT_EQ(lin.stages[1].rank, 1);
  EXPECT_EQ(lin.stages[1].begin, 3);
  EXPECT_EQ(lin.stages[1].end, 8);
  const Partition u = make_partition(Placement::kUShape, 3, 10, {}, {}, 2, 1);
  ASSERT_EQ(u.stages.size(), 4u);
  EXPECT_EQ(u.stage_ranks(), (std::vector<int>{0, 1, 2, 0}));
  EXPECT_EQ(u.stages[0].end, 2);
  EXPECT_EQ(u.stages[1].begin, 2);
  EXPECT_EQ(u.stages[2].end, 9);
  EXPECT_EQ(u.stages[3].begin, 9);
  EXPECT_EQ(u.stages[3].end, 10);
  EXPECT_EQ(u.stages[1].end - u.stages[1].begin, 3);  // 7 middle blocks over 2 servers: 3 + 4
  // Weights move the cut: a heavy first middle block gets a stage of its own.
  const Partition w = make_partition(Placement::kLinear, 2, 4, {}, {100, 1, 1, 1});
  EXPECT_EQ(w.stages[0].end, 1);
}

TEST(PipelinePartition, BadRequestsAreClearErrors) {
  EXPECT_THROW(make_partition(Placement::kLinear, 3, 12, {3, 5}, {}), std::invalid_argument);
  EXPECT_THROW(make_partition(Placement::kLinear, 3, 12, {3, 5, 5}, {}), std::invalid_argument);
  EXPECT_THROW(make_partition(Placement::kLinear, 2, 12, {12, 0}, {}), std::invalid_argument);
  EXPECT_THROW(make_partition(Placement::kLinear, 5, 4, {}, {}), std::invalid_argument);
  EXPECT_THROW(make_partition(Placement::kUShape, 1, 4, {}, {}), std::invalid_argument);
  EXPECT_THROW(make_partition(Placement::kUShape, 3, 3, {}, {}), std::invalid_argument);
  EXPECT_THROW(make_partition(Placement::kUShape, 2, 4, {}, {}, 0, 1), std::invalid_argument);
  EXPECT_THROW(parse_placement("ring"), std::invalid_argument);
}

}  // namespace
}  // namespace dtrain::parallel::pipeline
