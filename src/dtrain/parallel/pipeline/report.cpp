#include "dtrain/parallel/pipeline/report.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>

#include "dtrain/metrics/keys.h"
#include "dtrain/parallel/pipeline/schedule.h"

namespace dtrain::parallel::pipeline {

// One list of (key, member) per struct serves both directions.
#define DTRAIN_STAGE_TIMES_FIELDS(X) \
  X(forward_s)                       \
  X(backward_s)                      \
  X(encode_s) X(decode_s) X(recv_wait_s) X(send_wait_s) X(wire_check_s) X(step_s) X(steps)
#define DTRAIN_LINK_FIELDS(X) \
  X(src) X(dst) X(direction) X(bytes) X(fp32_bytes) X(messages) X(recv_time_s)
#define DTRAIN_RANK_REPORT_FIELDS(X) \
  X(rank)                            \
  X(blocks)                          \
  X(times) X(links) X(peak_rss_bytes) X(cuda_max_allocated_bytes) X(cuda_max_reserved_bytes)

#define DTRAIN_TO_JSON(field) j[#field] = value.field;
#define DTRAIN_FROM_JSON(field) j.at(#field).get_to(value.field);

void to_json(nlohmann::json& j, const StageTimes& value) {
  DTRAIN_STAGE_TIMES_FIELDS(DTRAIN_TO_JSON)
}
void from_json(const nlohmann::json& j, StageTimes& value) {
  DTRAIN_STAGE_TIMES_FIELDS(DTRAIN_FROM_JSON)
}
void to_json(nlohmann::json& j, const LinkRecord& value) {
  DTRAIN_LINK_FIELDS(DTRAIN_TO_JSON)
}
void from_json(const nlohmann::json& j, LinkRecord& value) {
  DTRAIN_LINK_FIELDS(DTRAIN_FROM_JSON)
}
void to_json(nlohmann::json& j, const RankReport& value) {
  DTRAIN_RANK_REPORT_FIELDS(DTRAIN_TO_JSON)
}
void from_json(const nlohmann::json& j, RankReport& value) {
  DTRAIN_RANK_REPORT_FIELDS(DTRAIN_FROM_JSON)
}

#undef DTRAIN_TO_JSON
#undef DTRAIN_FROM_JSON

namespace key = metrics::key;

namespace {

double bubble_of(const StageTimes& t) {
  return t.step_s > 0 ? std::max(0.0, t.idle_s()) / t.step_s : 0.0;
}

metrics::Row stage_row(const RankReport& r) {
  const auto& t = r.times;
  std::string blocks;
  for (const auto& b : r.blocks)
    blocks += (blocks.empty() ? "" : ",") + b;
  metrics::Row s;
  s[key::kRank] = r.rank;
  s[key::kBlocks] = blocks;
  s[key::kForwardS] = t.forward_s;
  s[key::kBackwardS] = t.backward_s;
  s[key::kEncodeS] = t.encode_s;
  s[key::kDecodeS] = t.decode_s;
  s[key::kRecvWaitS] = t.recv_wait_s;
  s[key::kSendWaitS] = t.send_wait_s;
  s[key::kWireCheckS] = t.wire_check_s;
  s[key::kIdleS] = std::max(0.0, t.idle_s());
  s[key::kStepS] = t.step_s;
  s[key::kBubble] = bubble_of(t);
  s[key::kPeakRssBytes] = r.peak_rss_bytes;
  if (r.cuda_max_reserved_bytes > 0) {  // a rank on a GPU: PyTorch's "max memory allocated"
    s[key::kCudaMaxAllocatedBytes] = r.cuda_max_allocated_bytes;
    s[key::kCudaMaxReservedBytes] = r.cuda_max_reserved_bytes;
  }
  return s;
}

metrics::Row link_row(const LinkRecord& l) {
  metrics::Row row;
  row[key::kSrc] = l.src;
  row[key::kDst] = l.dst;
  row[key::kDirection] = l.direction;
  row[key::kBytes] = l.bytes;
  row[key::kMessages] = l.messages;
  row[key::kRecvTimeS] = l.recv_time_s;
  row[key::kBandwidthGbps] =
      l.recv_time_s > 0 ? static_cast<double>(l.bytes) / l.recv_time_s / 1e9 : 0.0;
  row[key::kRatio] =
      l.fp32_bytes > 0 ? static_cast<double>(l.bytes) / static_cast<double>(l.fp32_bytes) : 1.0;
  return row;
}

std::vector<metrics::Row> rows_under(const metrics::Row& epoch_row, const char* name) {
  std::vector<metrics::Row> rows;
  if (epoch_row.contains(name))
    for (const auto& r : epoch_row[name])
      rows.push_back(r);
  return rows;
}

}  // namespace

metrics::Row summarize(const std::vector<RankReport>& reports, int micro_batches) {
  double wire = 0, fp32 = 0, bubble_sum = 0;
  int counted = 0;
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  nlohmann::ordered_json links = nlohmann::ordered_json::array();
  for (const auto& r : reports) {
    if (r.times.step_s > 0) {
      bubble_sum += bubble_of(r.times);
      ++counted;
    }
    stages.push_back(stage_row(r));
    for (const auto& l : r.links) {
      wire += static_cast<double>(l.bytes);
      fp32 += static_cast<double>(l.fp32_bytes);
      links.push_back(link_row(l));
    }
  }
  metrics::Row extra;
  extra[key::kCompressionRatio] = fp32 > 0 ? wire / fp32 : 1.0;
  extra[key::kBubbleMeasured] = counted > 0 ? bubble_sum / counted : 0.0;
  extra[key::kBubbleIdeal] = ideal_bubble(static_cast<int>(reports.size()), micro_batches);
  extra[key::kStages] = stages;
  extra[key::kLinks] = links;
  return extra;
}

std::vector<metrics::Row> stage_rows(const metrics::Row& epoch_row) {
  return rows_under(epoch_row, key::kStages);
}

std::vector<metrics::Column> stage_columns() {
  return {{key::kRank, "rank"},
          {key::kBlocks, "blocks"},
          {key::kForwardS, "fwd(s)", 2},
          {key::kBackwardS, "bwd(s)", 2},
          {key::kEncodeS, "encode(s)", 2},
          {key::kDecodeS, "decode(s)", 2},
          {key::kRecvWaitS, "recv wait(s)", 2},
          {key::kSendWaitS, "send wait(s)", 2},
          {key::kWireCheckS, "check(s)", 3},
          {key::kIdleS, "idle(s)", 2},
          {key::kBubble, "bubble", 3},
          {key::kPeakRssBytes, "peakRSS(B)"}};
}

std::vector<metrics::Row> link_rows(const metrics::Row& epoch_row) {
  return rows_under(epoch_row, key::kLinks);
}

std::vector<metrics::Column> link_columns() {
  return {{key::kSrc, "src"},
          {key::kDst, "dst"},
          {key::kDirection, "direction"},
          {key::kMessages, "messages"},
          {key::kBytes, "bytes"},
          {key::kRecvTimeS, "recv time(s)", 3},
          {key::kBandwidthGbps, "GB/s", 3},
          {key::kRatio, "wire/fp32", 4}};
}

std::vector<metrics::Row> auto_rows(const metrics::Row& epoch_row) {
  std::vector<metrics::Row> rows = rows_under(epoch_row, key::kAutoLinks);
  // The candidates' predictions, and a runoff's measurements, each as one readable cell.
  const auto cell = [](const metrics::Row& by_codec) {
    std::string text;
    for (const auto& [codec, seconds] : by_codec.items()) {
      char part[64];
      std::snprintf(part, sizeof(part), "%s%s %.4f", text.empty() ? "" : ", ", codec.c_str(),
                    seconds.get<double>());
      text += part;
    }
    return text;
  };
  for (auto& r : rows) {
    r[key::kPredictedBy] = cell(r[key::kPredictedBy]);
    r[key::kMeasuredBy] = r.contains(key::kMeasuredBy) ? cell(r[key::kMeasuredBy]) : "-";
  }
  return rows;
}

std::vector<metrics::Column> auto_columns() {
  return {{key::kSrc, "src"},
          {key::kDst, "dst"},
          {key::kRateMbps, "rate(Mbit/s)", 1},
          {key::kCodec, "codec"},
          {key::kPredictedStepS, "predicted step(s)", 4},
          {key::kPredictedBy, "predicted step(s) per candidate"},
          {key::kMeasuredBy, "measured step(s), runoff"}};
}

}  // namespace dtrain::parallel::pipeline
