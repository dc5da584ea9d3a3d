// `--compress-outer auto`: DiLoCo's outer codec chosen from the measured link and step time
// (parallel/diloco.h calls it at the first outer exchange, with the link probe's rate, and
// again after kExchangesToMeasure exchanges, with the rate they found; after a change, once
// more from the new codec's exchanges, among it and lossier ones).
//
// An exchange of a fragment of n values between 2 replicas is one message each way (exact:
// 4n bytes; coded: one packet of the whole fragment) and waits one one-way delay; among p > 2
// it sends, per rank, 2 (p - 1) messages in two phases (exact: 2 (p - 1) / p * 4n bytes;
// coded: 2 (p - 1) packets of a piece of n / p values) and waits two (exchange_delays). Its
// time is bytes / rate + those delays; the inner steps hide tau of them (--sync-delay), so
// what the training waits is
//   exposed = max(0, exchange - tau * step).
// One exchange happens every H / F steps (--sync-every, --fragments). Streaming (F > 1 or
// tau > 0) also exchanges every fragment at each epoch's last step, where no step hides it:
// F exchanges an epoch, spread over its E / (H / F) exchanges, add exchange * H / E to each.
// (At 20 Mbit/s that flush made exact streaming 14 % slower than 2-bit streaming while the
// exchanges themselves hid behind the steps.) The choice is the
// first candidate (least lossy first) whose exposed time is at most kExposedShare of those
// steps' time, so the replicas compute at least 95 % of the time; where none is, the one
// with the least exposed time (an earlier one within kPreferenceMargin of it, or within the
// budget of it, wins: a saving smaller than the budget is not worth a lossier codec). Codec
// time is not counted: a codec codes 1-3 GB/s a core, far faster than a link slow enough
// for the choice to matter.
#pragma once

#include <cstdint>
#include <future>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/compress/codec.h"
#include "dtrain/metrics/timer.h"

namespace dtrain::comm {
class Group;
}

namespace dtrain::parallel {

inline constexpr double kExposedShare = 0.05;
inline constexpr int64_t kExchangesToMeasure = 2;

struct OuterSetting {
  double step_s = 0;            // one inner step (the slowest replica's)
  double rate_bytes_per_s = 0;  // the slowest link's, both ways at once
  double latency_s = 0;         // one way, per message
  int64_t values = 0;           // in one fragment
  int replicas = 2;             // p (the group the exchange runs over)
  int64_t sync_every = 50, fragments = 1, sync_delay = 0;
  int64_t epoch_steps = 0;  // inner steps an epoch (0: unknown, no epoch-end exchange counted)
};

struct OuterChoice {
  size_t chosen = 0;
  std::vector<double> exchange_s;  // per candidate
  std::vector<double> exposed_s;   // per candidate
  double budget_s = 0;             // kExposedShare of the steps between exchanges
};

// Pure: the choice for `setting` among `candidates` (in preference order, none first) from
// `first` on (the earlier ones are not eligible: after a change from measured exchanges,
// only the codec in force or a lossier one). `chosen` indexes `candidates`.
OuterChoice choose_outer_codec(const std::vector<compress::CodecSpec>& candidates,
                               const OuterSetting& setting, size_t first = 0);

// One-way delays an exchange among `replicas` waits: exact and coded means go in one
// message each way between 2 replicas, in two phases among more (exact_mean.h,
// coded_feedback.h).
double exchange_delays(int replicas);

// The link's rate as the exchanges themselves found it: `bytes` sent per exchange in
// `exchange_s` each (the least of the ranks' means: the others include waiting for the last
// to arrive), less their delays at the setting's latency.
// Never above the setting's (the probe's) rate: an exchange shows a link slower for its
// traffic than the probe's trains (TCP's slow start after the idle inner steps, the cores
// shared with compute), but one barely longer than its delays says nothing of the rate.
double rate_from_exchanges(const OuterSetting& setting, double exchange_s, double bytes);

// Streaming DiLoCo's advice: the --sync-delay that would hide its exchanges, from an epoch's
// `exchanges` of `exchange_s` in all and its inner steps of `step_s`, where they outlasted
// `delay` steps by more than a tenth (the steps that cover the mean exchange and a tenth, at
// most `sync_every`: beyond H/F several exchanges are in flight); nullopt where `delay` hides
// them, where it is 0 (blocking, by choice) or already `sync_every`, or without numbers.
// At 100 ms one way a fragment's exchange took 127 ms, 4 steps of 20 ms hid 80 of them.
std::optional<int64_t> delay_to_hide(double exchange_s, int64_t exchanges, double step_s,
                                     int64_t delay, int64_t sync_every);

// The inner steps' own time, as auto's model needs it (how many steps hide an exchange): the
// span from DiLoCo's return after a step to its next call (the engine's data, forward,
// backward and optimizer; not DiLoCo's waits), the median of the spans recorded (an
// evaluation or a checkpoint between two steps does not move it). The first step of a run
// or an epoch is not timed (its span starts at the step's end). At a 50 Mbit/s, 100 ms link
// the steps beside the probe took 48 ms, those after it 41: the second choice times only
// the steps after the first.
class InnerStepTimes {
 public:
  void step_ended();    // records the span since step_started(), if any
  void step_started();  // at DiLoCo's return after a step
  void pause();         // the next span starts at the next step_started() (an epoch's end)
  void clear();         // forgets the spans recorded (the next choice times the steps after)
  bool empty() const { return spans_.empty(); }
  double median_s() const;  // 0 without spans

 private:
  std::optional<metrics::Clock::time_point> since_;
  std::vector<double> spans_;
};

// Collective over `group`: the slowest link between rank 0 and every other rank, probed
// both ways at once; every rank's future gets the same {rate, latency}. The pings go now, on
// the caller's thread (those of links under 10 ms; longer ones keep their reading from
// connect): beside the first exchanges they would wait behind an exchange's packets in the
// link's queue (an exchange of the mlp holds a 50 Mbit/s link for 31 ms), and beside the inner
// steps for the cores. The trains then go on a thread of their own, beside the inner steps and
// exchanges. A failure of the pings is the future's error too.
std::future<std::pair<double, double>> start_outer_probe(comm::Group& group, int ping_tag,
                                                         int data_tag);

// One line for people: the choice, the numbers it came from (the eligible candidates').
std::string describe(const OuterChoice& choice, const std::vector<compress::CodecSpec>& candidates,
                     const OuterSetting& setting, size_t first = 0);

}  // namespace dtrain::parallel
