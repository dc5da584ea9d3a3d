// `--compress auto` at run time: measures what auto_codec.h decides from and applies the
// decision, once per epoch after its first training step (the driver sends kCalibrate).
//
// Measured on every rank, for each compressed link it has:
//   - the link's own rate in each direction, by a probe between its two ranks while both
//     are idle: a 256 KiB and a 1 MiB message one way, 8 bytes back after each; the
//     difference of the two times is 768 KiB on the wire, free of latency, of the reply and
//     of a token bucket's burst (best of two); the latency is half an 8-byte round trip;
//   - for what it sent on each link since the epoch began (the last activation and
//     gradient, and how many): the exact packet bytes, encode and decode times of every
//     candidate;
//   - its compute per step (forward + backward).
// Followers send this to the driver, which decides (choose_codecs) and sends each rank the
// codecs of its outgoing links; packets describe themselves, so receivers need no notice.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <vector>

#include "dtrain/metrics/report.h"
#include "dtrain/parallel/pipeline/auto_codec.h"
#include "dtrain/parallel/pipeline/report.h"

namespace dtrain::parallel::pipeline {

class StageTransport;

class LinkTuner {
 public:
  LinkTuner(StageTransport& wire, const std::vector<int>& stage_rank, const AutoCompress& options);

  // Driver: gathers every rank's measurements, decides, sends the codecs, prints why.
  void calibrate_as_driver(const StageTimes& times, int micro_batches);
  // Follower, on kCalibrate: measures, reports, applies the codecs the driver sends back.
  void calibrate_as_follower(const StageTimes& times);

  // The last decision as metrics rows (key::kAutoLinks), empty before the first.
  std::vector<metrics::Row> rows() const;

 private:
  nlohmann::json measure(const StageTimes& times);
  void probe_pairs(nlohmann::json& out);
  void apply(const nlohmann::json& codecs);

  StageTransport& wire_;
  std::vector<std::pair<int, int>> pairs_;  // compressed links of the pipeline, a < b
  std::vector<compress::CodecSpec> candidates_;
  std::vector<LinkChoice> choices_;
  std::vector<std::vector<CandidateCost>> choice_costs_;
};

}  // namespace dtrain::parallel::pipeline
