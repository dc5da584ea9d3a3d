#include "dtrain/parallel/pipeline/report.h"

#include <nlohmann/json.hpp>

namespace dtrain::parallel::pipeline {

// One list of (key, member) per struct serves both directions.
#define DTRAIN_STAGE_TIMES_FIELDS(X) \
  X(forward_s)                       \
  X(backward_s) X(encode_s) X(decode_s) X(recv_wait_s) X(send_wait_s) X(step_s) X(steps)
#define DTRAIN_LINK_FIELDS(X) \
  X(src) X(dst) X(direction) X(bytes) X(fp32_bytes) X(messages) X(recv_time_s)
#define DTRAIN_RANK_REPORT_FIELDS(X) X(rank) X(blocks) X(times) X(links) X(peak_rss_bytes)

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

}  // namespace dtrain::parallel::pipeline
