// Pipeline schedules as data: for every rank, the ordered list of (forward | backward,
// stage, micro-batch) it executes. The stage runtime runs each list in order with
// blocking receives and non-blocking sends, so a schedule that verify() accepts cannot
// deadlock, whatever the real compute and transfer times are.
//
// Stages are "virtual": stage v runs on rank stage_rank[v]; one rank may run several
// (the U-shape's client runs the first and the last). Activations go v -> v+1, gradients
// v+1 -> v.
//
// Schedules are a table (schedule_table.cpp): each row a name, a help line and a generator
// of the per-rank lists, in a file of its own (schedule_gpipe.cpp, schedule_1f1b.cpp):
// - gpipe: a rank starts no backward before it has run all its forwards.
// - 1f1b: a backward goes first whenever one is ready; stage v holds at most
//   min(stages - v, ranks) micro-batches forwarded but not yet backwarded (linear chain:
//   stage 0 holds S, the last stage 1), which bounds activation memory.
// Adding a schedule: its file (a generator, usually a policy for the round-by-round
// simulation of schedule_policy.h) and one line of the table.
#pragma once

#include <string>
#include <vector>

namespace dtrain::parallel::pipeline {

enum class OpKind { kForward, kBackward };

struct Op {
  OpKind kind;
  int stage;
  int micro_batch;
  bool operator==(const Op& o) const {
    return kind == o.kind && stage == o.stage && micro_batch == o.micro_batch;
  }
};

struct Schedule {
  int ranks = 0;
  int micro_batches = 0;
  std::vector<int> stage_rank;           // virtual stage -> rank
  std::vector<std::vector<Op>> by_rank;  // rank -> ops in execution order
  int stages() const { return static_cast<int>(stage_rank.size()); }
};

// One row of the schedule table.
struct ScheduleFamily {
  const char* name;  // what --schedule takes
  const char* help;  // one line
  // The training schedule (forwards and backwards) of `micro_batches` on the placement.
  Schedule (*generate)(const std::vector<int>& stage_rank, int ranks, int micro_batches);
};
const std::vector<const ScheduleFamily*>& schedule_families();
// The name itself when a row has it; throws std::invalid_argument listing the names.
std::string parse_schedule(const std::string& name);
std::string schedule_names();  // "gpipe, 1f1b"

// Training schedule (forwards and backwards) of the named row. Throws
// std::invalid_argument on an unknown name, an empty placement, a rank out of range, a
// rank without a stage or micro_batches < 1.
Schedule make_schedule(const std::string& name, const std::vector<int>& stage_rank, int ranks,
                       int micro_batches);
// Evaluation: forwards only, micro-batches in order.
Schedule make_forward_schedule(const std::vector<int>& stage_rank, int ranks, int micro_batches);

// Checks that every op appears exactly once on the rank that owns its stage, that each
// rank's list respects its own dependencies, and that executing all lists in order with
// blocking receives completes. Throws std::logic_error describing the first violation.
void verify(const Schedule& schedule);

// Most micro-batches that `stage` holds at once (forwarded, not yet backwarded).
int peak_in_flight(const Schedule& schedule, int stage);

// The ideal bubble fraction of a GPipe or 1F1B step: (S-1)/(M+S-1).
double ideal_bubble(int stages, int micro_batches);

}  // namespace dtrain::parallel::pipeline
