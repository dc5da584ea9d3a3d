// A timeline of what each thread of this process did, written in Chrome's trace-event format
// (opened by Perfetto and chrome://tracing) by `--trace`.
//
// Contract
// - Off until start(): then span() and record() cost one relaxed atomic load and nothing
//   else. While recording, an event is appended to the calling thread's own buffer (an
//   uncontended lock), so threads never wait for each other.
// - `category` and `name` must outlive the trace (string literals, or names from a static
//   table): events keep the pointers.
// - Spans recorded by one thread nest or follow each other (they are taken from scoped
//   timers), which is what the trace viewers expect of one track.
// - Timestamps are this process's steady clock in nanoseconds; the writer shifts each
//   rank's events by the clock offset measured against rank 0 (comm/trace_gather.h).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/metrics/timer.h"

namespace dtrain::metrics::trace {

struct Event {
  const char* category = "";
  const char* name = "";
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  int64_t index = -1;           // micro-batch, bucket, iteration (-1: none)
  const char* index_name = "";  // what `index` counts
};

struct Track {
  int thread = 0;  // small id, in order of first event
  std::string name;
  std::vector<Event> events;
};

// Clears what was recorded and starts recording on every thread.
void start();
void stop();
bool recording();

// Nanoseconds of the trace clock at `t`.
int64_t to_ns(Clock::time_point t);

// Names the calling thread's track ("main", "ddp communication").
void name_thread(const std::string& name);

// Records [begin, now) on this thread when recording; returns the seconds since `begin`
// either way, so a timer that already sums a duration records its span in the same line.
double span_since(const char* category, const char* name, Clock::time_point begin,
                  int64_t index = -1, const char* index_name = "");

// A scoped span: records [construction, destruction) on this thread when recording.
class Span {
 public:
  Span(const char* category, const char* name, int64_t index = -1, const char* index_name = "");
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  const char* category_;
  const char* name_;
  int64_t index_;
  const char* index_name_;
  bool on_;
  Clock::time_point begin_;
};

// Every thread's events so far (a copy; recording may go on).
std::vector<Track> collect();

// This process's tracks as trace events of process `pid` (a rank): complete events ("X")
// with ts/dur in microseconds after `origin_ns` on the common clock, where this process'
// clock reads `offset_ns` less than the common one; plus thread-name metadata.
nlohmann::json to_events(const std::vector<Track>& tracks, int pid, int64_t origin_ns,
                         int64_t offset_ns);

// The whole file: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}.
// Returns the number of spans ("X" events) written.
int64_t write_file(const std::string& path, const nlohmann::json& events,
                   const nlohmann::json& other_data);

}  // namespace dtrain::metrics::trace
