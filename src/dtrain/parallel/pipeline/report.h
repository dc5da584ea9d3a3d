// What each pipeline rank measured in training steps since its last report, and the
// one definition of how a report crosses the wire: JSON objects keyed by field name
// (a field added here is a key added there; reading a report that lacks a key is an
// error naming it, never a silently shifted value).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/metrics/rows.h"

namespace dtrain::parallel::pipeline {

// Time one rank spent in training steps since the last report.
struct StageTimes {
  double forward_s = 0, backward_s = 0;  // compute (the loss counts as forward)
  double encode_s = 0, decode_s = 0;     // codecs
  double recv_wait_s = 0;                // blocked in receives (includes the transfer)
  double send_wait_s = 0;                // blocked waiting for sends to complete
  // The wire check's share (comm::Group::wire_check_seconds): checksums and framing copies
  // of this rank's messages, both directions; inside the sends and waits above, not extra.
  double wire_check_s = 0;
  double step_s = 0;  // wall time of the schedules
  int64_t steps = 0;
  double busy_s() const { return forward_s + backward_s + encode_s + decode_s; }
  double idle_s() const { return step_s - busy_s(); }
};

// Traffic into one rank from one peer, as the receiver saw it.
struct LinkRecord {
  int src = 0, dst = 0;
  std::string direction;   // "forward" (activations) or "backward" (gradients)
  int64_t bytes = 0;       // wire bytes (packets)
  int64_t fp32_bytes = 0;  // 4 * values carried
  int64_t messages = 0;
  double recv_time_s = 0;  // blocked in the receive (split-learning studies' recv_time)
};

struct RankReport {
  int rank = 0;
  std::vector<std::string> blocks;
  StageTimes times;
  std::vector<LinkRecord> links;
  int64_t peak_rss_bytes = 0;
  // The rank's GPU (metrics/cuda_memory.h); zero for a rank on the CPU.
  int64_t cuda_max_allocated_bytes = 0;
  int64_t cuda_max_reserved_bytes = 0;
};

// nlohmann::json conversions, by key (found by argument-dependent lookup). from_json
// throws nlohmann::json::exception naming a missing or mistyped key.
void to_json(nlohmann::json& j, const StageTimes& t);
void from_json(const nlohmann::json& j, StageTimes& t);
void to_json(nlohmann::json& j, const LinkRecord& l);
void from_json(const nlohmann::json& j, LinkRecord& l);
void to_json(nlohmann::json& j, const RankReport& r);
void from_json(const nlohmann::json& j, RankReport& r);

// One epoch's reports as metrics keys (metrics/keys.h): the wire/fp32 ratio, the measured
// bubble (mean over ranks of idle / step time) beside the ideal (S-1)/(M+S-1), and the
// per-rank ("stages") and per-link ("links") rows.
metrics::Row summarize(const std::vector<RankReport>& reports, int micro_batches);

// Those rows back out of an epoch row, and their table columns for people.
std::vector<metrics::Row> stage_rows(const metrics::Row& epoch_row);
std::vector<metrics::Column> stage_columns();
std::vector<metrics::Row> link_rows(const metrics::Row& epoch_row);
std::vector<metrics::Column> link_columns();
// --compress auto's choice per link (key::kAutoLinks), when it ran.
std::vector<metrics::Row> auto_rows(const metrics::Row& epoch_row);
std::vector<metrics::Column> auto_columns();

}  // namespace dtrain::parallel::pipeline
