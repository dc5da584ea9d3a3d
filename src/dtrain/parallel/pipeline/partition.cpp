#include "dtrain/parallel/pipeline/partition.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "dtrain/base/names.h"

namespace dtrain::parallel::pipeline {

namespace {
const EnumNames<Placement> kPlacementNames("placement", {{Placement::kLinear, "linear"},
                                                         {Placement::kUShape, "ushape"}});
}

Placement parse_placement(const std::string& name) {
  return kPlacementNames.parse(name);
}

std::string to_string(Placement placement) {
  return kPlacementNames.to_string(placement);
}

std::vector<int> Partition::stage_ranks() const {
  std::vector<int> out;
  for (const auto& s : stages)
    out.push_back(s.rank);
  return out;
}

std::vector<int64_t> balance_by_weight(const std::vector<double>& weights, int parts) {
  const auto n = static_cast<int64_t>(weights.size());
  if (parts < 1) throw std::invalid_argument("cannot split blocks into fewer than 1 stage");
  if (parts > n)
    throw std::invalid_argument("cannot split " + std::to_string(n) + " blocks into " +
                                std::to_string(parts) + " non-empty stages");
  // best[k][i]: smallest possible heaviest run when the first i blocks form k runs.
  std::vector<double> prefix(static_cast<size_t>(n + 1));
  for (int64_t i = 0; i < n; ++i)
    prefix[static_cast<size_t>(i + 1)] =
        prefix[static_cast<size_t>(i)] + std::max(0.0, weights[static_cast<size_t>(i)]);
  const double inf = std::numeric_limits<double>::infinity();
  const auto idx = [n](int k, int64_t i) { return static_cast<size_t>(k * (n + 1) + i); };
  std::vector<double> best(static_cast<size_t>((parts + 1) * (n + 1)), inf);
  std::vector<int64_t> cut(best.size(), 0);
  best[idx(0, 0)] = 0;
  for (int k = 1; k <= parts; ++k) {
    for (int64_t i = k; i <= n; ++i) {
      for (int64_t j = k - 1; j < i; ++j) {
        const double cost = std::max(
            best[idx(k - 1, j)], prefix[static_cast<size_t>(i)] - prefix[static_cast<size_t>(j)]);
        // Ties keep the earliest cut: earlier stages get fewer blocks, the last ones more.
        if (cost < best[idx(k, i)]) {
          best[idx(k, i)] = cost;
          cut[idx(k, i)] = j;
        }
      }
    }
  }
  std::vector<int64_t> counts(static_cast<size_t>(parts));
  int64_t i = n;
  for (int k = parts; k >= 1; --k) {
    const int64_t j = cut[idx(k, i)];
    counts[static_cast<size_t>(k - 1)] = i - j;
    i = j;
  }
  return counts;
}

Partition make_partition(Placement placement, int ranks, int64_t blocks,
                         const std::vector<int64_t>& counts, const std::vector<double>& weights,
                         int64_t client_first, int64_t client_last) {
  if (ranks < 1) throw std::invalid_argument("a pipeline needs at least one rank");
  const bool ushape = placement == Placement::kUShape;
  if (ushape && ranks < 2)
    throw std::invalid_argument(
        "--placement ushape needs at least 2 ranks (a client and a server)");
  if (ushape && (client_first < 1 || client_last < 1))
    throw std::invalid_argument("--client-blocks F,L needs F >= 1 and L >= 1");
  const int64_t first = ushape ? client_first : 0;
  const int64_t last = ushape ? client_last : 0;
  const int middle_parts = ushape ? ranks - 1 : ranks;
  const int64_t middle = blocks - first - last;
  if (middle < middle_parts) {
    throw std::invalid_argument(
        "the model has " + std::to_string(blocks) + " blocks: too few for " +
        std::to_string(ranks) + " ranks" +
        (ushape ? " with " + std::to_string(first) + "+" + std::to_string(last) + " client blocks"
                : std::string()) +
        " (every stage needs a block)");
  }
  std::vector<int64_t> sizes;
  if (!counts.empty()) {
    if (static_cast<int>(counts.size()) != middle_parts)
      throw std::invalid_argument("--balance needs " + std::to_string(middle_parts) + " counts (" +
                                  (ushape ? "one per server" : "one per rank") + "), got " +
                                  std::to_string(counts.size()));
    if (std::accumulate(counts.begin(), counts.end(), int64_t{0}) != middle)
      throw std::invalid_argument(
          "--balance counts add up to " +
          std::to_string(std::accumulate(counts.begin(), counts.end(), int64_t{0})) +
          ", the stages hold " + std::to_string(middle) + " blocks");
    for (const int64_t c : counts)
      if (c < 1) throw std::invalid_argument("--balance: every stage needs at least one block");
    sizes = counts;
  } else {
    std::vector<double> w(static_cast<size_t>(middle), 1.0);
    if (!weights.empty()) {
      if (static_cast<int64_t>(weights.size()) != blocks)
        throw std::invalid_argument("need one weight per block");
      w.assign(weights.begin() + first, weights.begin() + first + middle);
    }
    sizes = balance_by_weight(w, middle_parts);
  }
  Partition p;
  if (ushape) p.stages.push_back({0, 0, first});
  int64_t begin = first;
  for (int k = 0; k < middle_parts; ++k) {
    const int rank = ushape ? k + 1 : k;
    p.stages.push_back({rank, begin, begin + sizes[static_cast<size_t>(k)]});
    begin += sizes[static_cast<size_t>(k)];
  }
  if (ushape) p.stages.push_back({0, begin, blocks});
  return p;
}

}  // namespace dtrain::parallel::pipeline
