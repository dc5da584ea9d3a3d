// When DiLoCo's --compress-outer auto may choose, agreed by every rank of its group. The link
// probe's reading reaches each rank at its own time (rank 0 measures, then broadcasts), and
// every rank must change codec at the same exchange. So before the choice every rank tells
// every other whether the reading is in and how long its inner steps take, and a later
// exchange counts the answers: they cross beside the exchanges and steps in between, and
// training waits for them only at the first (answered at once, as the choice waited for every
// rank before), never for the probe itself.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace dtrain::comm {
class Group;
class Request;
}  // namespace dtrain::comm

namespace dtrain::parallel {

class ReadinessVote {
 public:
  // Votes travel on `tag` of `group`, which the caller keeps for nothing else.
  ReadinessVote(comm::Group& group, int tag);
  // Waits for a vote still out: every rank posts the same votes, so each is answered (or the
  // group has failed, and the wait throws at once; that error is not this destructor's to
  // report).
  ~ReadinessVote();
  ReadinessVote(const ReadinessVote&) = delete;
  ReadinessVote& operator=(const ReadinessVote&) = delete;

  struct Tally {
    bool everywhere = true;     // every rank had the reading when it voted
    double slowest_step_s = 0;  // the longest inner step any rank reported
  };
  // Sends this rank's vote to every other rank and posts the receives of theirs. Throws
  // std::logic_error while a vote is out, std::invalid_argument for a step time that is not
  // finite and >= 0.
  void post(bool reading_in, double step_s);
  bool out() const { return !requests_.empty(); }
  // Waits for the answers to the vote out and counts them with this rank's own; alike on
  // every rank. Throws std::logic_error when none is out, std::runtime_error naming the field
  // of a malformed answer.
  Tally count();

 private:
  comm::Group& group_;
  const int tag_;
  Tally mine_;
  at::Tensor sent_;
  std::vector<at::Tensor> answers_;
  std::vector<comm::Request> requests_;
};

}  // namespace dtrain::parallel
