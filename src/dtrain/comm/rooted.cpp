#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "dtrain/comm/collectives.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/tags.h"

namespace dtrain::comm {
namespace {

const int kRootedTag = collective_tag(CollectiveChannel::kRooted);

void check_parts(const Group& group, size_t parts, int root, const char* what) {
  if (root < 0 || root >= group.size())
    throw std::invalid_argument(group.describe() + ": " + what + " from root " +
                                std::to_string(root) + " of " + std::to_string(group.size()) +
                                " ranks");
  if (group.rank() == root && parts != static_cast<size_t>(group.size()))
    throw std::invalid_argument(group.describe() + ": " + what + " at the root needs " +
                                std::to_string(group.size()) + " parts, not " +
                                std::to_string(parts));
}

}  // namespace

void gather(Group& group, const at::Tensor& mine, std::vector<at::Tensor>& parts, int root) {
  check_parts(group, parts.size(), root, "gather");
  if (group.rank() != root) {
    if (mine.numel() > 0) group.send(mine, root, kRootedTag);
    return;
  }
  std::vector<Request> receives;
  for (int r = 0; r < group.size(); ++r) {
    at::Tensor& part = parts[static_cast<size_t>(r)];
    if (r == root)
      part.copy_(mine);
    else if (part.numel() > 0)
      receives.push_back(group.irecv(part, r, kRootedTag));
  }
  for (auto& r : receives)
    r.wait();
}

void scatter(Group& group, const std::vector<at::Tensor>& parts, at::Tensor& mine, int root) {
  check_parts(group, parts.size(), root, "scatter");
  if (group.rank() != root) {
    if (mine.numel() > 0) group.recv(mine, root, kRootedTag);
    return;
  }
  std::vector<Request> sends;
  for (int r = 0; r < group.size(); ++r) {
    const at::Tensor& part = parts[static_cast<size_t>(r)];
    if (r == root)
      mine.copy_(part);
    else if (part.numel() > 0)
      sends.push_back(group.isend(part, r, kRootedTag));
  }
  for (auto& s : sends)
    s.wait();
}

}  // namespace dtrain::comm
