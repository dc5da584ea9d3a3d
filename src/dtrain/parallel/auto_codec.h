// `--compress auto` (pipeline) and `--compress-grad auto` (DDP): which codec each link
// should carry, chosen from measured numbers (no ranks, no timing here: the runtimes in
// pipeline/link_tuner.h and ddp_codec_tuner.h measure, this decides).
//
// Model (the classic pipeline estimate, as in GPipe's bubble analysis): every rank and
// every directed link is a resource a micro-batch passes through. Per micro-batch, rank r
// costs compute_r / M plus the encode time of what it sends and the decode time of what it
// receives; link l costs its bytes / rate + its latency per message. With M micro-batches
//   predicted step = sum of all per-micro-batch costs + (M - 1) * the largest one,
// i.e. one micro-batch's trip through every resource, then one micro-batch per bottleneck
// time. The codec of each link is the candidate that minimizes this prediction with the
// other links at their choice (every combination when there are few links, else one link
// at a time until nothing improves). Candidates are in preference order (least lossy
// first): an earlier candidate within 5 % of the best prediction wins, so near-ties (a fast
// link) keep the exact codec and the choice does not flap between epochs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/compress/codec.h"
#include "dtrain/metrics/rows.h"

namespace dtrain::parallel {

// An earlier (less lossy) candidate within this fraction of the best prediction wins.
inline constexpr double kPreferenceMargin = 0.05;

struct AutoCompress {
  std::vector<compress::CodecSpec> candidates;  // in preference order for ties
  int min_bits = 8;                             // never below this many bits per value
  // auto_runoff.h: candidates predicted within this fraction of the choice are run off
  // against it by measurement; 0 trusts the prediction.
  double runoff_window = 0.25;
};
// none, fp16, sortquant:12, sortquant:8.
std::vector<compress::CodecSpec> default_auto_candidates();
// The candidates with at least `min_bits` bits per value; throws when none is left.
std::vector<compress::CodecSpec> eligible_candidates(const AutoCompress& options);

// What one candidate costs on one directed link per training step.
struct CandidateCost {
  compress::CodecSpec codec;
  double bytes = 0;     // wire bytes per step
  double encode_s = 0;  // at the sender, per step
  double decode_s = 0;  // at the receiver, per step
};

struct LinkMeasurement {
  int src = 0, dst = 0;
  double rate_bytes_per_s = 0;       // the link's own rate (probe: bytes over time on the wire)
  double latency_s = 0;              // one way, per message
  double messages = 0;               // per step
  std::vector<CandidateCost> costs;  // one per candidate, same order on every link
};

struct AutoInput {
  std::vector<double> compute_s;  // per rank, forward + backward per step
  int micro_batches = 1;
  std::vector<LinkMeasurement> links;
};

// What a runoff (auto_runoff.h) measured on this link: mean step seconds with candidate a
// (the prediction's choice) and with candidate b, over `pairs` counted pairs of steps.
struct RunoffResult {
  int64_t pairs = 0;
  size_t a = 0, b = 0;
  double a_step_s = 0, b_step_s = 0;
};

// The choice for one link, and why: the predicted step time with each candidate there,
// and what a runoff measured, if one ran.
struct LinkChoice {
  int src = 0, dst = 0;
  double rate_bytes_per_s = 0;
  size_t chosen = 0;                     // index into the candidates
  std::vector<double> predicted_step_s;  // per candidate
  std::optional<RunoffResult> runoff;
  std::string rate_from = "probe";  // how rate_bytes_per_s was measured: metrics::key::kRateFrom
};

double predict_step_s(const AutoInput& input, const std::vector<size_t>& choice);
std::vector<LinkChoice> choose_codecs(const AutoInput& input);

// The choice as a metrics row (metrics::key::kAutoLinks): src, dst, rate_mbps, codec,
// predicted_step_s and the prediction per candidate; after a runoff also runoff_pairs and
// the measured step per codec run off.
metrics::Row to_row(const LinkChoice& choice, const std::vector<compress::CodecSpec>& candidates);

// "link 0->1 at 98.4 Mbit/s: sortquant:6:2 (predicted step 0.210 s; none 0.640, ...)".
std::string describe(const LinkChoice& choice, const std::vector<CandidateCost>& costs);

}  // namespace dtrain::parallel
