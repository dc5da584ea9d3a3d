#include "dtrain/parallel/pipeline/schedule.h"

#include <algorithm>
#include <stdexcept>

#include "dtrain/base/table.h"
#include "dtrain/parallel/pipeline/schedule_policy.h"

namespace dtrain::parallel::pipeline {
namespace {

// Completion state of every (stage, micro-batch) during a simulation.
struct Progress {
  int stages, micro_batches;
  std::vector<char> forwarded, backwarded;
  std::vector<int> next_forward, next_backward;  // per stage, micro-batches go in order
  Progress(int s, int m)
      : stages(s),
        micro_batches(m),
        forwarded(static_cast<size_t>(s * m)),
        backwarded(static_cast<size_t>(s * m)),
        next_forward(static_cast<size_t>(s)),
        next_backward(static_cast<size_t>(s)) {}
  size_t at(int stage, int mb) const { return static_cast<size_t>(stage * micro_batches + mb); }
  bool ready(const Op& op) const {
    if (op.kind == OpKind::kForward) {
      return op.micro_batch == next_forward[static_cast<size_t>(op.stage)] &&
             (op.stage == 0 || forwarded[at(op.stage - 1, op.micro_batch)]);
    }
    return op.micro_batch == next_backward[static_cast<size_t>(op.stage)] &&
           forwarded[at(op.stage, op.micro_batch)] &&
           (op.stage == stages - 1 || backwarded[at(op.stage + 1, op.micro_batch)]);
  }
  void complete(const Op& op) {
    if (op.kind == OpKind::kForward) {
      forwarded[at(op.stage, op.micro_batch)] = 1;
      ++next_forward[static_cast<size_t>(op.stage)];
    } else {
      backwarded[at(op.stage, op.micro_batch)] = 1;
      ++next_backward[static_cast<size_t>(op.stage)];
    }
  }
  int in_flight(int stage) const {
    return next_forward[static_cast<size_t>(stage)] - next_backward[static_cast<size_t>(stage)];
  }
};

void check_placement(const std::vector<int>& stage_rank, int ranks, int micro_batches) {
  if (stage_rank.empty()) throw std::invalid_argument("a pipeline needs at least one stage");
  if (micro_batches < 1) throw std::invalid_argument("a pipeline needs at least one micro-batch");
  std::vector<char> used(static_cast<size_t>(std::max(ranks, 0)));
  for (const int r : stage_rank) {
    if (r < 0 || r >= ranks)
      throw std::invalid_argument("stage placed on rank " + std::to_string(r) + " of " +
                                  std::to_string(ranks));
    used[static_cast<size_t>(r)] = 1;
  }
  for (int r = 0; r < ranks; ++r) {
    if (!used[static_cast<size_t>(r)])
      throw std::invalid_argument("rank " + std::to_string(r) + " has no pipeline stage");
  }
}

}  // namespace

Schedule simulate(const SchedulePolicy& policy, bool with_backward,
                  const std::vector<int>& stage_rank, int ranks, int micro_batches) {
  check_placement(stage_rank, ranks, micro_batches);
  Schedule s;
  s.ranks = ranks;
  s.micro_batches = micro_batches;
  s.stage_rank = stage_rank;
  s.by_rank.resize(static_cast<size_t>(ranks));
  const int stages = s.stages();
  std::vector<std::vector<int>> owned(static_cast<size_t>(ranks));
  for (int v = stages - 1; v >= 0; --v)  // deeper stages first: drain before filling
    owned[static_cast<size_t>(stage_rank[static_cast<size_t>(v)])].push_back(v);

  Progress p(stages, micro_batches);
  std::vector<int> forwards_left(static_cast<size_t>(ranks));
  for (const int r : stage_rank)
    forwards_left[static_cast<size_t>(r)] += micro_batches;
  const size_t total = static_cast<size_t>(stages * micro_batches) * (with_backward ? 2 : 1);
  size_t done = 0;
  while (done < total) {
    std::vector<Op> round;
    for (int r = 0; r < ranks; ++r) {
      const auto& mine = owned[static_cast<size_t>(r)];
      std::vector<Op> candidates;
      auto try_backward = [&] {
        if (!with_backward) return;
        if (policy.flush_forwards && forwards_left[static_cast<size_t>(r)] > 0) return;
        for (const int v : mine) {
          const Op op{OpKind::kBackward, v, p.next_backward[static_cast<size_t>(v)]};
          if (op.micro_batch < micro_batches && p.ready(op)) candidates.push_back(op);
        }
      };
      auto try_forward = [&] {
        for (const int v : mine) {
          const Op op{OpKind::kForward, v, p.next_forward[static_cast<size_t>(v)]};
          if (op.micro_batch >= micro_batches || !p.ready(op)) continue;
          if (with_backward && policy.in_flight_limit != nullptr &&
              p.in_flight(v) >= policy.in_flight_limit(v, stages, ranks))
            continue;
          candidates.push_back(op);
        }
      };
      if (policy.backward_first) {
        try_backward();
        try_forward();
      } else {
        try_forward();
        try_backward();
      }
      if (!candidates.empty()) round.push_back(candidates.front());
    }
    if (round.empty()) throw std::logic_error("pipeline schedule generation stalled");
    for (const Op& op : round) {
      p.complete(op);
      const int r = stage_rank[static_cast<size_t>(op.stage)];
      if (op.kind == OpKind::kForward) --forwards_left[static_cast<size_t>(r)];
      s.by_rank[static_cast<size_t>(r)].push_back(op);
      ++done;
    }
  }
  return s;
}

namespace {

std::string describe(const Op& op) {
  return std::string(op.kind == OpKind::kForward ? "F" : "B") + "(stage " +
         std::to_string(op.stage) + ", micro-batch " + std::to_string(op.micro_batch) + ")";
}

}  // namespace

#define DTRAIN_SCHEDULE_TABLE(ROW, T)             \
  ROW(T, kGPipeSchedule) /* schedule_gpipe.cpp */ \
  ROW(T, k1F1BSchedule)  /* schedule_1f1b.cpp */

DTRAIN_TABLE(ScheduleFamily, schedule_families, DTRAIN_SCHEDULE_TABLE)

std::string schedule_names() {
  std::string names;
  for (const ScheduleFamily* f : schedule_families())
    names += (names.empty() ? "" : ", ") + std::string(f->name);
  return names;
}

std::string parse_schedule(const std::string& name) {
  for (const ScheduleFamily* f : schedule_families())
    if (name == f->name) return name;
  throw std::invalid_argument("unknown schedule '" + name + "' (" + schedule_names() + ")");
}

Schedule make_schedule(const std::string& name, const std::vector<int>& stage_rank, int ranks,
                       int micro_batches) {
  for (const ScheduleFamily* f : schedule_families())
    if (name == f->name) return f->generate(stage_rank, ranks, micro_batches);
  parse_schedule(name);  // throws, listing the names
  return {};
}

Schedule make_forward_schedule(const std::vector<int>& stage_rank, int ranks, int micro_batches) {
  return simulate(SchedulePolicy{}, false, stage_rank, ranks, micro_batches);
}

void verify(const Schedule& s) {
  const int stages = s.stages();
  const int m = s.micro_batches;
  if (static_cast<int>(s.by_rank.size()) != s.ranks)
    throw std::logic_error("schedule has lists for " + std::to_string(s.by_rank.size()) +
                           " ranks, expected " + std::to_string(s.ranks));
  bool with_backward = false;
  std::vector<int> seen(static_cast<size_t>(stages * m * 2));
  for (int r = 0; r < s.ranks; ++r) {
    for (const Op& op : s.by_rank[static_cast<size_t>(r)]) {
      if (op.stage < 0 || op.stage >= stages || op.micro_batch < 0 || op.micro_batch >= m)
        throw std::logic_error("rank " + std::to_string(r) +
                               " has an op out of range: " + describe(op));
      if (s.stage_rank[static_cast<size_t>(op.stage)] != r)
        throw std::logic_error("rank " + std::to_string(r) + " runs " + describe(op) +
                               " of another rank");
      with_backward |= op.kind == OpKind::kBackward;
      ++seen[static_cast<size_t>(((op.kind == OpKind::kBackward) * stages + op.stage) * m +
                                 op.micro_batch)];
    }
  }
  for (int k = 0; k < (with_backward ? 2 : 1); ++k) {
    for (int v = 0; v < stages; ++v) {
      for (int mb = 0; mb < m; ++mb) {
        const int count = seen[static_cast<size_t>((k * stages + v) * m + mb)];
        if (count != 1)
          throw std::logic_error(describe(Op{k ? OpKind::kBackward : OpKind::kForward, v, mb}) +
                                 " appears " + std::to_string(count) + " times");
      }
    }
  }
  // Execute: every rank advances while its next op's inputs are complete.
  Progress p(stages, m);
  std::vector<size_t> pc(static_cast<size_t>(s.ranks));
  bool moved = true;
  while (moved) {
    moved = false;
    for (int r = 0; r < s.ranks; ++r) {
      const auto& ops = s.by_rank[static_cast<size_t>(r)];
      auto& i = pc[static_cast<size_t>(r)];
      while (i < ops.size()) {
        const Op& op = ops[i];
        const bool ready =
            op.kind == OpKind::kForward
                ? op.stage == 0 || p.forwarded[p.at(op.stage - 1, op.micro_batch)]
                : p.forwarded[p.at(op.stage, op.micro_batch)] &&
                      (op.stage == stages - 1 || p.backwarded[p.at(op.stage + 1, op.micro_batch)]);
        if (!ready) break;
        if (op.kind == OpKind::kForward)
          p.forwarded[p.at(op.stage, op.micro_batch)] = 1;
        else
          p.backwarded[p.at(op.stage, op.micro_batch)] = 1;
        ++i;
        moved = true;
      }
    }
  }
  for (int r = 0; r < s.ranks; ++r) {
    const auto& ops = s.by_rank[static_cast<size_t>(r)];
    const auto i = pc[static_cast<size_t>(r)];
    if (i < ops.size())
      throw std::logic_error("schedule deadlocks: rank " + std::to_string(r) +
                             " waits forever at " + describe(ops[i]));
  }
}

int peak_in_flight(const Schedule& s, int stage) {
  const int r = s.stage_rank.at(static_cast<size_t>(stage));
  int live = 0, peak = 0;
  for (const Op& op : s.by_rank[static_cast<size_t>(r)]) {
    if (op.stage != stage) continue;
    live += op.kind == OpKind::kForward ? 1 : -1;
    peak = std::max(peak, live);
  }
  return peak;
}

double ideal_bubble(int stages, int micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

}  // namespace dtrain::parallel::pipeline
