#include "dtrain/parallel/elastic_sync.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <stdexcept>

#include "dtrain/comm/collectives.h"
#include "dtrain/comm/error.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/small_message.h"
#include "dtrain/comm/tags.h"

namespace dtrain::parallel {
namespace {

enum class Use : int { kRecord = 1, kStateLength = 2, kState = 3, kProgress = 4 };

int tag(Use use) {
  static const comm::TagLayout layout(comm::TagSpace::kElastic, {{"use", 4}, {"phase", 4}});
  return layout.make({static_cast<int>(use), 0});
}

// A record crosses as one small message (comm/small_message.h): float64 values, exact for
// the times and counts; the 64-bit digest as two 32-bit halves.
constexpr int64_t kRecordValues = 12;
constexpr int64_t kMaxCount = int64_t{1} << 53;

at::Tensor message_of(const Record& r) {
  const ExchangeMeasure& m = r.measured;
  return comm::MessageWriter()
      .count(r.round)
      .count(r.proposal)
      .count(static_cast<int64_t>(r.digest >> 32))
      .count(static_cast<int64_t>(r.digest & 0xffffffffu))
      .count(r.samples)
      .count(m.exchanges)
      .real(m.exchange_s)
      .real(m.bytes)
      .real(m.step_s)
      .real(m.rate_bytes_per_s)
      .real(m.latency_s)
      .count(m.floor)
      .finish();
}

Record record_of(const at::Tensor& message, int from) {
  comm::MessageReader in(message, kRecordValues,
                         "elastic record from rank " + std::to_string(from));
  Record r;
  r.round = in.count(0, kMaxCount, "round");
  r.proposal = in.count(0, kMaxCount, "proposal");
  const auto high = static_cast<uint64_t>(in.count(0, 0xffffffffu, "digest"));
  r.digest = high << 32 | static_cast<uint64_t>(in.count(0, 0xffffffffu, "digest"));
  r.samples = in.count(0, kMaxCount, "samples");
  ExchangeMeasure& m = r.measured;
  m.exchanges = in.count(0, kMaxCount, "exchanges");
  m.exchange_s = in.real();
  m.bytes = in.real();
  m.step_s = in.real();
  m.rate_bytes_per_s = in.real();
  m.latency_s = in.real();
  m.floor = in.count(0, kMaxCount, "floor");
  return r;
}

bool contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

std::vector<Record> exchange_records(comm::Group& group, const Record& mine) {
  const int p = group.size(), me = group.rank();
  const at::Tensor out = message_of(mine);
  std::vector<at::Tensor> in(static_cast<size_t>(p));
  std::vector<comm::Request> receives, sends;
  for (int r = 0; r < p; ++r) {
    if (r == me) continue;
    in[static_cast<size_t>(r)] = at::empty({kRecordValues}, at::kDouble);
    receives.push_back(
        group.irecv_opening_if_fits(in[static_cast<size_t>(r)], r, tag(Use::kRecord)));
  }
  for (int r = 0; r < p; ++r)
    if (r != me) sends.push_back(group.isend_opening_if_fits(out, r, tag(Use::kRecord)));
  for (auto& req : receives)
    req.wait();
  for (auto& req : sends)
    req.wait();
  std::vector<Record> records(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    Record& rec = records[static_cast<size_t>(r)];
    rec = r == me ? mine : record_of(in[static_cast<size_t>(r)], r);
    if (rec.round != mine.round)
      throw comm::CommError("elastic: rank " + std::to_string(r) + "'s record is of round " +
                            std::to_string(rec.round) + ", this member's of round " +
                            std::to_string(mine.round));
  }
  return records;
}

double contribution_weight(int64_t samples, int64_t full) {
  if (full <= 0) throw std::invalid_argument("elastic: a full share of no samples");
  return static_cast<double>(samples) / static_cast<double>(full);  // exactly 1 when equal
}

double reweigh_factor(const std::vector<Record>& records, int64_t full) {
  double total = 0;
  for (const Record& r : records)
    total += contribution_weight(r.samples, full);
  // No samples at all: every contribution is zero, and so is the mean.
  if (total <= 0) return 1.0;
  return static_cast<double>(records.size()) / total;  // exactly 1 with every share full
}

Majority majority_digest(const std::vector<Record>& records) {
  std::map<uint64_t, int> votes;
  for (const auto& r : records)
    ++votes[r.digest];
  Majority m;
  int best = 0;
  for (const auto& r : records) {  // rank order: the first to reach the most votes wins ties
    if (votes[r.digest] > best) {
      best = votes[r.digest];
      m.digest = r.digest;
    }
  }
  for (size_t i = 0; i < records.size(); ++i)
    if (records[i].digest != m.digest) m.differ.push_back(static_cast<int>(i));
  return m;
}

void transfer_state(comm::Group& group, const std::vector<int>& donors,
                    const std::vector<int>& receivers, at::Tensor& state,
                    std::vector<int64_t>& progress, uint64_t& digest) {
  if (donors.empty()) throw std::invalid_argument("a state transfer without donors");
  const int me = group.rank();
  const bool donor = contains(donors, me), receiver = contains(receivers, me);
  if (!donor && !receiver) return;
  const int first = donors.front();
  // The sizes first, from the first donor: a receiver of another model fails here, clearly.
  at::Tensor lengths = at::empty({3}, at::kLong);
  if (donor)
    lengths = at::tensor(
        {state.numel(), static_cast<int64_t>(progress.size()), static_cast<int64_t>(digest)},
        at::kLong);
  std::vector<comm::Request> pending;
  if (me == first)
    for (const int r : receivers)
      pending.push_back(group.isend(lengths, r, tag(Use::kStateLength)));
  if (receiver) {
    group.recv(lengths, first, tag(Use::kStateLength));
    const auto* w = lengths.data_ptr<int64_t>();
    if (state.defined() && state.numel() != w[0])
      throw std::invalid_argument(group.describe() + ": a shared state of " + std::to_string(w[0]) +
                                  " values where this replica's model "
                                  "holds " +
                                  std::to_string(state.numel()) +
                                  " (replicas of different models or optimizers?)");
    state = at::empty({w[0]}, at::kFloat);
    progress.assign(static_cast<size_t>(w[1]), 0);
    digest = static_cast<uint64_t>(w[2]);
  }
  const int64_t n = state.numel();
  const auto d = static_cast<int>(donors.size());
  at::Tensor words = at::empty({static_cast<int64_t>(progress.size())}, at::kLong);
  if (donor) std::copy(progress.begin(), progress.end(), words.data_ptr<int64_t>());
  for (int i = 0; i < d; ++i) {
    const int64_t begin = n * i / d, count = n * (i + 1) / d - begin;
    if (count == 0) continue;  // both ends know: nothing goes (an empty inner state)
    at::Tensor part = state.narrow(0, begin, count);
    if (me == donors[static_cast<size_t>(i)])
      for (const int r : receivers)
        pending.push_back(group.isend(part, r, tag(Use::kState)));
    if (receiver)
      pending.push_back(group.irecv(part, donors[static_cast<size_t>(i)], tag(Use::kState)));
  }
  if (me == first)
    for (const int r : receivers)
      pending.push_back(group.isend(words, r, tag(Use::kProgress)));
  if (receiver) pending.push_back(group.irecv(words, first, tag(Use::kProgress)));
  for (auto& req : pending)
    req.wait();
  if (receiver)
    std::copy(words.data_ptr<int64_t>(), words.data_ptr<int64_t>() + words.numel(),
              progress.begin());
}

}  // namespace dtrain::parallel
