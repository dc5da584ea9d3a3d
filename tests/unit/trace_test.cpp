// The trace recorder (metrics/trace.h): what it records, and the events it writes.
#include <gtest/gtest.h>

#include <thread>

#include "dtrain/metrics/trace.h"

namespace dtrain::metrics {
namespace {

TEST(TraceTest, RecordsOnlyWhileOnAndShiftsByTheOffset) {
  { trace::Span before("t", "not recorded"); }
  trace::start();
  trace::name_thread("main");
  {
    trace::Span outer("t", "outer");
    trace::Span inner("t", "inner", 3, "mb");
  }
  std::thread([] {
    trace::name_thread("worker");
    trace::span_since("t", "on a thread", Clock::now());
  }).join();
  trace::stop();
  { trace::Span after("t", "not recorded"); }
  const auto tracks = trace::collect();
  int events = 0;
  for (const auto& t : tracks)
    events += static_cast<int>(t.events.size());
  EXPECT_EQ(events, 3);
  const auto json = trace::to_events(tracks, 2, 1000, 500);
  int spans = 0;
  for (const auto& e : json) {
    EXPECT_EQ(e["pid"], 2);
    if (e["ph"] != "X") continue;
    ++spans;
    if (e["name"] == "inner") {
      EXPECT_EQ(e["args"]["mb"], 3);
    }
  }
  EXPECT_EQ(spans, 3);
  // ts = (begin + offset - origin) / 1000
  const auto& first = tracks[0].events[0];
  for (const auto& e : json) {
    if (e["ph"] == "X" && e["name"] == first.name) {
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(),
                       static_cast<double>(first.begin_ns + 500 - 1000) / 1e3);
    }
  }
}

}  // namespace
}  // namespace dtrain::metrics
