// `--compress auto` at run time: measures what auto_codec.h decides from and applies the
// decision, once per epoch after its second training step (the first may carry warm-up;
// the driver sends kCalibrate). Until the first decision every tuned link carries the last
// (most compressive) candidate: a wrong first guess then costs some coding time on a fast
// link instead of a whole uncompressed step on a slow one.
//
// Measured on every rank, for each compressed link it has:
//   - the link's own rate in each direction (comm/link_probe.h, between its two ranks
//     while both are idle) and its latency;
//   - for what it sent on each link since the epoch began (the last activation and
//     gradient, and how many): the exact packet bytes, encode and decode times of every
//     candidate;
//   - its compute (forward + backward) in that step.
// Followers send this to the driver, which decides (choose_codecs) and sends each rank the
// codecs of the links it sends and receives on (a receiver sizes its buffers with them).
// When another assignment is predicted close, the driver then runs it off against the
// choice over the next training steps (auto_runoff.h), sending kSetCodecs and the codecs
// before each step that switches; a runoff the epoch ends first goes back to the choice.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <vector>

#include "dtrain/metrics/rows.h"
#include "dtrain/parallel/auto_codec.h"
#include "dtrain/parallel/auto_runoff.h"
#include "dtrain/parallel/pipeline/report.h"

namespace dtrain::parallel::pipeline {

class StageTransport;

class LinkTuner {
 public:
  LinkTuner(StageTransport& wire, const std::vector<int>& stage_rank, const AutoCompress& options);
  ~LinkTuner();

  // Driver: gathers every rank's measurements, decides, sends the codecs, prints why.
  void calibrate_as_driver(double compute_s, int micro_batches);
  // Follower, on kCalibrate: measures, reports, applies the codecs the driver sends back.
  void calibrate_as_follower(double compute_s);
  // Driver, around each training step: a runoff's switching and timing.
  void before_step();
  void after_step(double seconds, int64_t samples);
  // Driver, at the end of an epoch: an unfinished runoff goes back to the prediction's choice.
  void end_epoch();
  // Follower, on kSetCodecs.
  void receive_codecs();

  // The last decision as metrics rows (key::kAutoLinks), empty before the first.
  std::vector<metrics::Row> rows() const;

  // One rank's numbers, sent to the driver (its JSON is defined beside it, in the .cpp).
  struct Measurement;

 private:
  Measurement measure(double compute_s);
  void probe_pairs(Measurement& m);  // fills m.probes
  AutoInput to_input(const std::vector<Measurement>& all, int micro_batches) const;
  void apply(const nlohmann::json& codecs);
  // Driver: every rank's links to the candidates of `assignment` (per choices_ entry).
  void send_codecs(const Assignment& assignment);
  // Driver, between steps: kSetCodecs and send_codecs, unless the links carry it already.
  void switch_to(const Assignment& assignment);

  StageTransport& wire_;
  std::vector<std::pair<int, int>> pairs_;  // this rank's compressed links, a < b, sorted
  std::vector<compress::CodecSpec> candidates_;
  double runoff_window_;
  std::vector<LinkChoice> choices_;
  Assignment applied_;            // driver: what the links carry now
  std::optional<Runoff> runoff_;  // driver
};

}  // namespace dtrain::parallel::pipeline
