// Group::irecv_from_any (group.h): a receive matched by tag alone. Every sender frames a
// message of a given size alike (framing.cpp), so its first message, the one Gloo matches
// from any rank, has the same size whoever sends it; the rest of the message (its other
// pieces and its check) is received from that rank once the first has come.
#include <ATen/ATen.h>

#include "dtrain/comm/backend.h"
#include "dtrain/comm/error.h"
#include "dtrain/comm/request_state.h"

namespace dtrain::comm {

namespace {
// The connections a striped message of any peer takes: the same to every peer, or an error.
int common_streams(const Group& group) {
  int k = 0;
  for (int peer = 0; peer < group.size(); ++peer) {
    if (peer == group.rank()) continue;
    if (k != 0 && group.streams(peer) != k)
      throw std::invalid_argument(group.describe() +
                                  ": a receive from any rank of a striped message needs the "
                                  "same streams to every peer (set_streams)");
    k = group.streams(peer);
  }
  return k;
}
}  // namespace

Request Group::irecv_from_any(at::Tensor& tensor, int tag) {
  if (size_ < 2) throw std::invalid_argument(describe() + ": no other rank to receive from");
  if (!tensor.device().is_cpu() || !tensor.is_contiguous())
    throw std::invalid_argument(describe() +
                                ": a receive from any rank takes a contiguous CPU tensor");
  if (tag < 0) throw std::invalid_argument(describe() + ": negative tag");
  throw_if_aborted();
  Request req = new_request(tensor, -1, tag, Direction::kRecv);
  auto& s = *req.state_;
  if (s.bytes == 0)  // nothing would cross to say who sent it
    throw std::invalid_argument(describe() + ": a receive from any rank of 0 bytes");
  const at::Tensor bytes = tensor.view({-1}).view(at::kByte);
  const int k = s.bytes >= kStripeMinBytes ? common_streams(*this) : 1;
  Plan plan;
  plan_message(s, bytes, k, PostOptions{}, plan);
  try {
    std::vector<at::Tensor> first{plan.messages[0]};
    s.works.push_back(connection(plan.streams[0]).recvAnysource(first, tag));
  } catch (const std::exception& e) {
    s.done = true;
    fail(s.dir, s.peer, s.tag, s.bytes, 0.0, e.what());
  }
  for (const auto& m : plan.messages)
    s.keep_alive.push_back(m);
  s.await_source = [this, plan](Request::State& r) {
    r.peer = r.works[0]->sourceRank();
    for (size_t i = 1; i < plan.messages.size(); ++i) {
      std::vector<at::Tensor> one{plan.messages[i]};
      r.works.push_back(connection(plan.streams[i]).recv(one, r.peer, r.tag));
    }
    track(r);
  };
  track(s);
  return req;
}

}  // namespace dtrain::comm
