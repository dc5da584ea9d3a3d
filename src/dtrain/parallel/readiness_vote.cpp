#include "dtrain/parallel/readiness_vote.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "dtrain/comm/group.h"
#include "dtrain/comm/small_message.h"

namespace dtrain::parallel {
namespace {
constexpr int64_t kFields = 2;  // the reading is in (0 / 1), the step's seconds
}  // namespace

ReadinessVote::ReadinessVote(comm::Group& group, int tag) : group_(group), tag_(tag) {}

ReadinessVote::~ReadinessVote() {
  try {
    for (auto& r : requests_)
      r.wait();
  } catch (const std::exception&) {
  }
}

void ReadinessVote::post(bool reading_in, double step_s) {
  if (out()) throw std::logic_error("ReadinessVote: a vote is already out");
  if (!std::isfinite(step_s) || step_s < 0)
    throw std::invalid_argument("ReadinessVote: a step time of " + std::to_string(step_s) + " s");
  mine_ = {reading_in, step_s};
  sent_ = comm::MessageWriter().flag(reading_in).real(step_s).finish();
  answers_.clear();
  answers_.reserve(static_cast<size_t>(group_.size()));
  for (int peer = 0; peer < group_.size(); ++peer) {
    if (peer == group_.rank()) continue;
    answers_.push_back(at::empty({kFields}, at::kDouble));
    requests_.push_back(group_.irecv(answers_.back(), peer, tag_));
  }
  for (int peer = 0; peer < group_.size(); ++peer)
    if (peer != group_.rank()) requests_.push_back(group_.isend(sent_, peer, tag_));
}

ReadinessVote::Tally ReadinessVote::count() {
  if (!out()) throw std::logic_error("ReadinessVote: no vote is out");
  std::vector<comm::Request> requests = std::move(requests_);
  requests_.clear();
  for (auto& r : requests)
    r.wait();
  Tally tally = mine_;
  for (const auto& answer : answers_) {
    comm::MessageReader in(answer, kFields, "--compress-outer auto's readiness vote");
    const bool in_there = in.flag("reading in");
    const double step_s = in.real();
    if (step_s < 0) in.fail("step seconds", "negative");
    tally.everywhere = tally.everywhere && in_there;
    tally.slowest_step_s = std::max(tally.slowest_step_s, step_s);
  }
  return tally;
}

}  // namespace dtrain::parallel
