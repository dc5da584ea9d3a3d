#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "dtrain/comm/collectives.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/tags.h"

namespace dtrain::comm {

void all_to_all(Group& group, const std::vector<at::Tensor>& out, std::vector<at::Tensor>& in) {
  const auto p = static_cast<size_t>(group.size());
  if (out.size() != p || in.size() != p)
    throw std::invalid_argument(group.describe() + ": all_to_all needs " + std::to_string(p) +
                                " tensors each way, not " + std::to_string(out.size()) + " and " +
                                std::to_string(in.size()));
  const int tag = collective_tag(CollectiveChannel::kAllToAll);
  const auto me = static_cast<size_t>(group.rank());
  // Receives first: Gloo sends only to a posted receive, and each pair's notices then
  // travel ahead of the payloads.
  std::vector<Request> receives, sends;
  for (size_t j = 0; j < p; ++j)
    if (j != me && in[j].numel() > 0)
      receives.push_back(group.irecv(in[j], static_cast<int>(j), tag));
  // Send to the ranks after this one first, so that not every rank starts on rank 0.
  for (size_t k = 1; k < p; ++k) {
    const size_t j = (me + k) % p;
    if (out[j].numel() > 0) sends.push_back(group.isend(out[j], static_cast<int>(j), tag));
  }
  in[me].copy_(out[me]);
  for (auto& r : receives)
    r.wait();
  for (auto& s : sends)
    s.wait();
}

}  // namespace dtrain::comm
